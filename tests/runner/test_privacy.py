"""Private by default (rundir/privacy.py, rundir/publish.py, spec/bundle.py): pseudonyms, masked texts, what a
bundle leaves out. Pure functions and small files: well under a second."""

from __future__ import annotations

import json
import os
from pathlib import Path

from aiperf_runner.rundir import privacy, publish
from aiperf_runner.spec import bundle


def test_pseudonyms_are_stable_keyed_and_hide_the_name(tmp_path: Path) -> None:
    secret = privacy.site_secret(tmp_path)
    assert privacy.site_secret(tmp_path) == secret  # made once, then read
    assert (tmp_path / privacy.SECRET_NAME).stat().st_mode & 0o777 == 0o600
    a = privacy.Masker(secret=secret)
    b = privacy.Masker(secret=secret)  # another run of the same site
    assert a.host("gpu017") == b.host("gpu017") == a.host("gpu017.cluster.example.org")
    assert a.host("gpu017").startswith("node-") and "gpu017" not in a.host("gpu017")
    assert a.host("gpu017") != a.host("gpu018")
    other_site = privacy.Masker(secret=os.urandom(32))
    assert other_site.host("gpu017") != a.host("gpu017")
    assert privacy.Masker(secret=secret, publish_hostnames=True).host("gpu017") == "gpu017"
    assert privacy.Masker().host("gpu017") == "node-?"  # no secret, unknown name: never the raw name


def test_text_masks_hosts_homes_and_paths(tmp_path: Path) -> None:
    run_dir, data = tmp_path / "runs" / "r1", tmp_path / "imagenet"
    m = privacy.Masker(secret=b"k" * 32, roots={str(run_dir): "", str(data): "<data>"})
    m.learn(["gpu017", "login1.hpc.example.org"])
    home = os.path.expanduser("~")
    text = (f'File "{run_dir}/trials/t0003/stderr.log"; no file {data}/train/n01/x.JPEG\n'
            f"slurmstepd-gpu017: error on gpu017.hpc.example.org, from login1 (gpu0170 is another node)\n"
            f"{home}/.cache/torch and /home/alice/bin/x.py and /opt/site/nccl/lib/libnccl-net.so; "
            "see https://example.org/a/b and 3.5 it/s")
    out = m.text(text)
    assert 'File "trials/t0003/stderr.log"' in out and "<data>/train/n01/x.JPEG" in out
    assert "gpu017" not in out.replace("gpu0170", "") and "login1" not in out
    assert f"slurmstepd-{m.host('gpu017')}: error on {m.host('gpu017')}," in out
    assert "gpu0170 is another node" in out
    assert "~/.cache/torch" in out and "~/bin/x.py" in out and "alice" not in out
    assert ".../libnccl-net.so" in out and "/opt/site" not in out
    assert "https://example.org/a/b" in out and "3.5 it/s" in out


def test_config_split_and_merge() -> None:
    config = {"data": "/scratch/imagenet", "backend": "slurm",
              "backend_options": {"partition": "gpu", "account": "proj42", "qos": "high",
                                  "extra_sbatch_args": ["--reservation=bench"]}}
    public, private = privacy.split_config(config)
    assert public["data"] is None and public["backend_options"] == {"partition": "gpu"}
    assert "proj42" not in json.dumps(public) and "high" not in json.dumps(public)
    assert privacy.merge_config(public, private) == config


def test_not_bundled_and_the_listing(tmp_path: Path) -> None:
    for name in ("weights.safetensors", "checkpoint.pt", "model.ckpt", "stdout.log", "slurm-2.sh", "slurm-1.nodes"):
        assert bundle.not_bundled(f"trials/t0000/{name}"), name
    assert bundle.not_bundled("local/private.json") and bundle.not_bundled("local")
    for name in ("run.json", "events.jsonl", "trials/t0000/graph.json", "trials/t0000/stdout.public.log"):
        assert bundle.not_bundled(name) is None, name
    run = tmp_path / "run"
    trial = run / "trials" / "t0000"
    trial.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": "ab" * 16}))
    (run / "events.jsonl").write_text("")
    (trial / "checkpoint.pt").write_bytes(b"x" * 10)
    (trial / "stdout.log").write_text(f"on {os.uname().nodename} in {trial.resolve()}\n")
    privacy.write_hostnames(run, {os.uname().nodename: "node-000000000001"})
    rows = {r["path"]: r for r in publish.listing(run)}
    assert rows["trials/t0000/checkpoint.pt"]["bundled"] is False
    assert rows["trials/t0000/stdout.log"]["bundled"] is False
    assert rows["local/hostnames.json"]["bundled"] is False
    copy = rows["trials/t0000/stdout.public.log"]
    assert copy["bundled"] and copy["size"] == len("on node-000000000001 in trials/t0000\n")
    assert not (trial / "stdout.public.log").exists()  # listing writes nothing
    assert publish.write_public_logs(run) == ["trials/t0000/stdout.public.log"]
    assert bundle.run_files(run) == ["events.jsonl", "run.json", "trials/t0000/stdout.public.log"]


def test_the_trial_reads_its_data_root_from_local(tmp_path: Path) -> None:
    from aiperf_runner.spec.seeds import seed_for_preset
    from aiperf_runner.train.config import TrialConfig

    run = tmp_path / "run"
    trial = run / "trials" / "t0000"
    trial.mkdir(parents=True)
    dataset = {"name": "cifar", "train_images": 10, "val_images": 10, "classes": 10, "image_size": 32, "channels": 3}
    (trial / "trial.json").write_text(json.dumps({"trial": "t0000", "epoch_budget": 1, "preset": "cifar",
                                                  "dataset": dataset}))  # no "data": it is not published
    (trial / "hparams.json").write_text(json.dumps({"batch_size": 64, "lr": 0.1}))
    (trial / "graph.json").write_text(seed_for_preset("cifar", 10, 32).dumps())
    privacy.write_private(run, {"data": "/scratch/site/cifar10"})
    assert TrialConfig.load(trial).data.root == "/scratch/site/cifar10"


def _run_with_named_facts(run_dir: Path, monkeypatch, **config_kw) -> dict:
    """A run of the inprocess backend whose system facts name a host and a home directory; its run.json."""
    from aiperf_runner.backends.inprocess import InProcessBackend
    from aiperf_runner.run.controller import Controller

    from tests.runner.conftest import config

    monkeypatch.setattr(InProcessBackend, "known_hosts", lambda self: ["gpu017"])
    monkeypatch.setattr(InProcessBackend, "system_facts", lambda self: {
        "nodes": 1, "head_node": "gpu017.cluster.example.org", "scratch": "/home/alice/scratch",
        "extra": {"where": ["gpu017"]}})
    controller = Controller.create(config(duration_s=60.0, **config_kw), run_dir)
    controller.request_stop()
    controller.run()
    return json.loads((run_dir / "run.json").read_text())


def test_every_backends_system_facts_are_masked_in_run_json(tmp_path: Path, fake_env) -> None:
    """Not only the slurm backends': whatever a backend's system_facts() says goes through the run's masker."""
    run_json = _run_with_named_facts(tmp_path / "run", fake_env)
    text = (tmp_path / "run" / "run.json").read_text()
    assert "gpu017" not in text and "alice" not in text
    pseudonym = privacy.read_hostnames(tmp_path / "run")["gpu017"]
    system = run_json["system"]
    assert system["head_node"] == pseudonym and system["extra"] == {"where": [pseudonym]}
    assert system["scratch"] == "~/scratch" and system["nodes"] == 1
    assert system["cpu_model"]  # this machine's own facts are there as before


def test_the_site_may_publish_its_host_names(tmp_path: Path, fake_env) -> None:
    run_json = _run_with_named_facts(tmp_path / "run", fake_env, publish_hostnames=True)
    assert run_json["system"]["head_node"] == "gpu017.cluster.example.org"
    assert run_json["system"]["scratch"] == "~/scratch"  # paths are masked all the same
