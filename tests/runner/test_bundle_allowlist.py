"""A bundle holds only what the runner wrote (spec/bundle.py `BUNDLED`, an allow-list): every file a run of the
runner leaves in its directory is on the allow-list or kept out for a reason of its own, and anything else (an
admin's note, a job script's SLURM output) is left out of the bundle and listed as such by `pack --list`.
The run directory still checks against its manifest after packing. The runs take a few seconds each."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from aiperf_runner.data.presets import get_preset
from aiperf_runner.run.controller import Controller
from aiperf_runner.rundir import publish
from aiperf_runner.rundir.config import RunConfig
from aiperf_runner.spec import bundle, keys
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.seeds import seed_for_preset

from tests.integrity.rundir import make_run
from tests.runner.conftest import cli, run_controller

# What runs of each backend leave beside the bundled files (as in real smoke runs of the local, inprocess,
# slurm and slurm-steps backends): each is kept out by name, for a reason other than NOT_WRITTEN.
KEPT_OUT = ("trials/t0000/stdout.log", "trials/t0000/stderr.log", "trials/t0000/weights.safetensors",
            "trials/t0000/checkpoint.pt", "trials/t0000/checkpoint.pt.tmp", "trials/t0000/pid",
            "trials/t0000/slurm-1.sh", "trials/t0000/slurm-1.exit", "trials/t0000/slurm-1.jobid",
            "trials/t0000/slurm-1.nodes", "trials/t0000/slurm-2.step", "controller.lock", "run.json.tmp",
            "local/hostnames.json", "local/private.json", "local/zygote.log", "local/data-index.json")
BUNDLED = ("MANIFEST.json", "MANIFEST.sig", "run.json", "events.jsonl", "trials/t0000/events.jsonl",
           "trials/t0000/graph.json", "trials/t0000/hparams.json", "trials/t0000/trial.json",
           "trials/t0000/stdout.public.log", "trials/t0000/stderr.public.log")
FOREIGN = ("NOTES.txt", "slurm-1234.out", "trials/t0000/notes.md", "trials/t0000/x/graph.json",
           "trials/t0000/run.json", "trials/events.jsonl", "extra/run.json")
STAND_IN_FILES = "fake_pid."  # tests/runner/fake_trial.py's own record of its process: the real program has none


def _not_written(run_dir: Path) -> list[str]:
    rows = publish.listing(run_dir)
    return [r["path"] for r in rows if r["why"] == bundle.NOT_WRITTEN
            and not r["path"].rsplit("/", 1)[-1].startswith(STAND_IN_FILES)]


def _members(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return tar.getnames()


def _assert_all_accounted_for(run_dir: Path, out: Path) -> None:
    """Packed: nothing in the run directory is foreign to the runner, and the bundle holds what the listing says."""
    bundle.pack(run_dir, out, keys.generate_key())
    assert _not_written(run_dir) == []
    rows = publish.listing(run_dir)
    assert _members(out) == [r["path"] for r in rows if r["bundled"]]
    assert {"run.json", "events.jsonl", "trials/t0000/graph.json"} <= set(_members(out))


def test_the_allow_list_names_the_runners_files_and_nothing_else() -> None:
    for rel in BUNDLED:
        assert bundle.why_bundled(rel) and bundle.left_out(rel) is None, rel
    for rel in KEPT_OUT:
        assert bundle.left_out(rel) not in (None, bundle.NOT_WRITTEN), rel
    for rel in FOREIGN:  # `*` stands for one path component: a trial's directory, never a deeper one
        assert bundle.why_bundled(rel) is None, rel
        assert bundle.left_out(rel) is not None, rel


@pytest.mark.parametrize("backend", ["inprocess", "local"])
def test_a_run_of_the_runner_leaves_nothing_the_allow_list_forgets(tmp_path: Path, fake_env, backend: str) -> None:
    """A file the runner starts to write and the allow-list forgets fails here (add it to BUNDLED or NOT_BUNDLED)."""
    fake_env.setenv("FAKE_CHECKPOINT", "1")  # a checkpoint left behind, as by a program killed in teardown
    run_dir = tmp_path / "run"
    run_controller(run_dir, backend=backend, duration_s=3.0, epoch_budgets=[1, 2])
    publish.write_public_logs(run_dir)
    _assert_all_accounted_for(run_dir, tmp_path / "run.tar.gz")
    assert any(p.name == "stdout.public.log" for p in run_dir.glob("trials/*/*"))


def test_a_simulated_run_leaves_nothing_the_allow_list_forgets(tmp_path: Path) -> None:
    dataset = get_preset("smoke").dataset(None)
    counts = flops_per_image(seed_for_preset("smoke", dataset["classes"], dataset["image_size"]))
    work = counts.train * dataset["train_images"] + counts.eval * dataset["val_images"]
    config = RunConfig(preset="smoke", slots=2, duration_s=2.0, backend="sim", epoch_budgets=[1, 2],
                       backend_options={"flops_per_s": work / 0.1})
    Controller.create(config, tmp_path / "run").run()
    publish.write_public_logs(tmp_path / "run")
    _assert_all_accounted_for(tmp_path / "run", tmp_path / "run.tar.gz")


def test_a_note_and_a_jobs_output_are_left_out_and_listed(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run")
    (run_dir / "NOTES.txt").write_text("rerun on gpu017 after the NCCL hang (admin)\n")
    (run_dir / "slurm-1234.out").write_text("slurmstepd: error: *** JOB 1234 ON gpu017 CANCELLED ***\n")
    env = {"AIPERF_CONFIG_DIR": str(tmp_path / "config")}
    assert cli("keygen", env=env).returncode == 0

    text = cli("pack", "--list", str(run_dir), env=env)
    assert text.returncode == 0, text.stderr
    held, _, left = text.stdout.partition("left out (they stay in the run directory):")
    assert "NOTES.txt" not in held and "slurm-1234.out" not in held
    lines = {line.split()[0]: line for line in left.splitlines() if line.strip()}
    assert bundle.NOT_WRITTEN in lines["NOTES.txt"]
    assert bundle.not_bundled("slurm-1234.out") in lines["slurm-1234.out"]

    listed = cli("pack", "--list", "--json", str(run_dir), env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {r["path"]: r for r in json.loads(listed.stdout)["files"]}
    assert rows["NOTES.txt"] == {"path": "NOTES.txt", "size": (run_dir / "NOTES.txt").stat().st_size,
                                 "bundled": False, "why": bundle.NOT_WRITTEN}
    assert rows["slurm-1234.out"]["bundled"] is False and "SLURM" in rows["slurm-1234.out"]["why"]

    out = tmp_path / "run.tar.gz"
    packed = cli("pack", str(run_dir), "-o", str(out), env=env)
    assert packed.returncode == 0, packed.stderr
    members = _members(out)
    assert members == [p for p, r in rows.items() if r["bundled"]]
    assert "NOTES.txt" not in members and "slurm-1234.out" not in members
    assert "NOTES.txt" not in json.loads((run_dir / bundle.MANIFEST_NAME).read_text())["files"]
    public = keys.load_public_key(tmp_path / "config" / "site_key.pub")
    dest = tmp_path / "received"
    bundle.safe_extract(out, dest)
    assert bundle.check_manifest(dest, public) == []

    # The run directory still checks against its manifest: what signing left out is recorded in local/ ...
    assert bundle.check_manifest(run_dir, public) == []
    record = json.loads((run_dir / bundle.LOCAL_DIR / bundle.LEFT_OUT_NAME).read_text())
    assert record["files"] == ["NOTES.txt"]  # slurm-1234.out is kept out by name, as SLURM files always were
    # ... and a file added after signing is still reported, in the run directory as in a bundle.
    (run_dir / "trials" / "t0000" / "extra.json").write_text("{}")
    assert bundle.check_manifest(run_dir, public) == [
        "file trials/t0000/extra.json added after signing (not in MANIFEST.json)"]
    (dest / "NOTES.txt").write_text("unsigned\n")
    assert bundle.check_manifest(dest, public) == ["file NOTES.txt added after signing (not in MANIFEST.json)"]
    # A bundle cannot bring such a record of its own: local/ is never bundled, and unpacking refuses it.
    forged = tmp_path / "forged.tar.gz"
    with tarfile.open(forged, "w:gz") as tar:
        tar.add(dest, arcname=".")
        tar.add(run_dir / bundle.LOCAL_DIR / bundle.LEFT_OUT_NAME, arcname=f"{bundle.LOCAL_DIR}/{bundle.LEFT_OUT_NAME}")
    with pytest.raises(bundle.BundleError, match="local/"):
        bundle.safe_extract(forged, tmp_path / "forged")
    # Signed again with nothing foreign left, the record goes.
    (run_dir / "NOTES.txt").unlink()
    (run_dir / "trials" / "t0000" / "extra.json").unlink()
    bundle.write_manifest(run_dir, keys.generate_key())
    assert not (run_dir / bundle.LOCAL_DIR / bundle.LEFT_OUT_NAME).exists()
