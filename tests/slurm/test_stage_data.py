"""`run --stage-data` on the two-node cluster: each node stages its own checked copy of the data
and the trials read it; a node whose copy is corrupted is refused, with the reason in the log, and
the run stops using it: the refused attempt is retried on the other node, which runs every later trial.

The two nodes are slurmds on this one machine, so the stage directory names the node (`%n`) to
give each its own copy. The trials are the fast stand-in (tests/runner/fake_trial.py), which stages
exactly as the real trial program does (stagedata.stage_for_trial); tests/runner/test_stagedata.py
covers the real program. With slurm-steps, each node checks its copy once per allocation, and a
node holding a damaged copy loses its slot. About 90 s in all (40 s with the slurm backend, 20 + 12 s
with slurm-steps, the cluster's start and stop).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

from aiperf_runner.data import staging as stagedata

from tests.helpers import REPO
from tests.slurm.cluster import RUNNER, env_for, finish, queue, read_events, run_tag, slurm, start_run, wait_until
from tests.slurm.test_two_node import pseudonyms


def _image_folder(root: Path) -> Path:
    for split, n in (("train", 6), ("val", 2)):
        for c in range(3):
            d = root / split / f"class{c}"
            d.mkdir(parents=True)
            for i in range(n):
                (d / f"img{i}.png").write_bytes(bytes(range(256)) * (i + 1))
    return root


def _attempt_nodes(events: list[dict]) -> dict[tuple[str, int], list[str]]:
    """Where each attempt ran: its trial_started's nodes (nominal while the job had not started),
    or those its trial_finished / trial_failed names where the job ran elsewhere."""
    nodes = {(e["trial"], e["attempt"]): e["nodes"] for e in events if e["type"] == "trial_started"}
    nodes.update({(e["trial"], e["attempt"]): e["nodes"] for e in events
                  if e["type"] in ("trial_finished", "trial_failed") and "nodes" in e})
    return nodes


def test_each_node_stages_a_checked_copy_and_a_corrupted_one_is_refused(two_node: Path, tmp_path: Path) -> None:
    data = _image_folder(tmp_path / "data")
    stage = tmp_path / "nvme"
    run_dir = tmp_path / "run"
    proc = start_run(two_node, run_dir, "--preset", "cifar", "--data", str(data), "--stage-data", f"{stage}/%n",
                     "--duration", "5m", "--trial-module", "tests.runner.fake_trial", FAKE_EPOCH_S="0.1")
    try:
        # 1. Trials finish on both nodes, each from its node's own staged copy.
        def finished_on_both() -> bool:
            events = read_events(run_dir)
            nodes = _attempt_nodes(events)
            done = {n for e in events if e["type"] == "trial_finished" for n in nodes[(e["trial"], e["attempt"])]}
            return done == pseudonyms(run_dir, "n1", "n2")

        wait_until(finished_on_both, 60, "finished trials on n1 and n2", proc)
        run_json = json.loads((run_dir / "run.json").read_text())
        source = run_json["data_source"]
        assert source["files"] == 24 and source["kind"] == "folder"
        assert source["source"] == "<data>" and source["staged_to"] == ".../%n"  # no site path published
        assert run_json["config"]["stage_data"] is None and run_json["config"]["data"] is None
        copies = {node: stage / node / f"aiperf-data-{source['index_sha256'][:16]}" for node in ("n1", "n2")}
        for node, copy in copies.items():
            assert stagedata.digest(stagedata.build_index(copy, "folder")) == source["index_sha256"], node
            assert list(copy.parent.glob(f".{copy.name}.checked-job*")), node  # checked in a trial's job
        banners = " ".join(p.read_text() for p in run_dir.glob("trials/*/stdout.log"))
        for node, copy in copies.items():
            assert f"data: {copy} (24 files) on {node}" in banners

        # 2. n2's copy loses bytes of a file: the next job there refuses it, n1 goes on training.
        bad = copies["n2"] / "train" / "class1" / "img3.png"
        bad.write_bytes(bad.read_bytes()[:100])
        corrupted_at = len(read_events(run_dir))

        def refused() -> list[dict]:
            return [e for e in read_events(run_dir)[corrupted_at:] if e["type"] == "trial_failed"
                    and "does not match the run's data manifest" in e["error"]]

        failures = wait_until(refused, 60, "an attempt on n2 refused", proc)
        (n2,) = pseudonyms(run_dir, "n2")
        error = failures[0]["error"]
        assert f"node {n2}:" in error and "wrong size: train/class1/img3.png (100 bytes, not 1024)" in error, error
        assert "Refused" in error and str(stage) not in error  # the path is masked as every error text is
        nodes = _attempt_nodes(read_events(run_dir))
        assert all(nodes[(e["trial"], e["attempt"])] == [n2] for e in refused())
        assert failures[0]["retry"] is True

        # 3. n2 is excluded: its slot is lost, with the node and the refusal in the log ...
        def lost() -> list[dict]:
            return [e for e in read_events(run_dir) if e["type"] == "slot_lost"]

        (slot_lost,) = wait_until(lost, 10, "n2's slot lost", proc)
        assert slot_lost["node"] == n2 and slot_lost["seq"] > failures[0]["seq"], slot_lost
        assert "does not match the run's data manifest" in slot_lost["reason"] and f"on node {n2}:" in slot_lost["reason"]
        assert not re.search(r"\bn[12]\b", slot_lost["reason"]) and str(stage) not in slot_lost["reason"]

        # ... the refused attempt runs again on n1, and so does every trial submitted since.
        (n1,) = pseudonyms(run_dir, "n1")

        def on_n1_since() -> list[dict]:
            started = [e for e in read_events(run_dir) if e["type"] == "trial_started" and e["seq"] > slot_lost["seq"]]
            return started if len(started) >= 4 else []

        def job_of(e: dict) -> str:
            job = (run_dir / "trials" / e["trial"] / f"slurm-{e['attempt']}.jobid").read_text().strip()
            return slurm(two_node, "scontrol", "show", "job", job)

        started = wait_until(on_n1_since, 40, "four trials started after n2 was excluded", proc)
        # Launches run in the background: one submitted before the exclusion (for the other slot) may return, and
        # log its start, after slot_lost; it may land on n2. Every job submitted since excludes n2.
        early = [e for e in started if e["nodes"] != [n1]]
        assert len(early) <= 1 and all("ExcNodeList=(null)" in job_of(e) for e in early), (early, started)
        retried = (failures[0]["trial"], failures[0]["attempt"] + 1)
        assert retried in {(e["trial"], e["attempt"]) for e in started}, started
        # Not the scheduler's whim: the jobs were submitted excluding n2.
        assert "ExcNodeList=n2" in job_of({"trial": retried[0], "attempt": retried[1]})

        def finished_on_n1_after() -> bool:
            events = read_events(run_dir)
            nodes = _attempt_nodes(events)
            return any(e["type"] == "trial_finished" and nodes[(e["trial"], e["attempt"])] == [n1]
                       for e in events[corrupted_at:])

        wait_until(finished_on_n1_after, 30, "a trial finished on n1 after n2's copy was corrupted", proc)
        proc.send_signal(signal.SIGINT)
        finish(proc, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not [n for n, _ in queue(two_node).values() if n.startswith(run_tag(run_dir))]


def _steps_run(conf: Path, data: Path, stage: Path, run_dir: Path, duration: str) -> subprocess.CompletedProcess[str]:
    """A slurm-steps run in a two-node allocation (salloc), staging to `stage`/<node>."""
    return subprocess.run(["salloc", "--nodes=2", "--time=5", *RUNNER, "run", "--backend", "slurm-steps",
                           "--preset", "cifar", "--data", str(data), "--stage-data", f"{stage}/%n",
                           "--duration", duration, "--backend-opt", "probe=false", "--progress", "none",
                           "--out", str(run_dir), "--trial-module", "tests.runner.fake_trial"],
                          env=env_for(conf, FAKE_EPOCH_S="0.05"), capture_output=True, text=True, timeout=120,
                          cwd=str(REPO))


def test_slurm_steps_check_each_node_once_per_allocation(two_node: Path, tmp_path: Path) -> None:
    """The controller inside one allocation (salloc), trials as its steps: each node copies and
    checks the data once, however many trials it runs."""
    data = _image_folder(tmp_path / "data")
    stage = tmp_path / "nvme"
    run_dir = tmp_path / "run"
    proc = _steps_run(two_node, data, stage, run_dir, "15s")
    assert "run finished (duration)" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    digest = json.loads((run_dir / "run.json").read_text())["data_source"]["index_sha256"]
    banners = " ".join(p.read_text() for p in run_dir.glob("trials/*/stdout.log"))
    job = re.search(r"step of SLURM job (\d+)", banners)
    assert job, banners[-2000:]
    for node in ("n1", "n2"):
        copy = stage / node / f"aiperf-data-{digest[:16]}"
        assert banners.count(f"data: {copy} (24 files) on {node}") >= 2, banners[-2000:]  # several trials there
        assert sorted(p.name for p in copy.parent.glob(".*.checked-*")) == [f".{copy.name}.checked-job{job[1]}"]


def test_slurm_steps_lose_the_slot_of_a_node_whose_copy_is_refused(two_node: Path, tmp_path: Path) -> None:
    """n2 holds a damaged copy from before: its first trial is refused, its slot lost, and the run
    goes on with n1 alone, the refused attempt retried there (15 s)."""
    data = _image_folder(tmp_path / "data")
    stage = tmp_path / "nvme"
    index = stagedata.build_index(data, "folder")
    bad = stage / "n2" / f"aiperf-data-{stagedata.digest(index)[:16]}"
    stagedata._copy(data, bad, index)
    (bad / "val" / "class2" / "img1.png").unlink()
    run_dir = tmp_path / "run"
    proc = _steps_run(two_node, data, stage, run_dir, "10s")
    assert "run finished (duration)" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    events = read_events(run_dir)
    n1, n2 = (pseudonyms(run_dir, n).pop() for n in ("n1", "n2"))
    (refused,) = [e for e in events if e["type"] == "trial_failed"]
    assert "missing: val/class2/img1.png" in refused["error"] and refused["retry"] is True
    (lost,) = [e for e in events if e["type"] == "slot_lost"]
    assert lost["node"] == n2 and "missing: val/class2/img1.png" in lost["reason"]
    started = [e for e in events if e["type"] == "trial_started"]
    assert [e["slot"] for e in started if e["nodes"] == [n2]] == [lost["slot"]]  # its one attempt there
    after = [e for e in started if e["seq"] > lost["seq"]]
    assert len(after) >= 2 and all(e["nodes"] == [n1] and e["slot"] != lost["slot"] for e in after), after
    assert (refused["trial"], refused["attempt"] + 1) in {(e["trial"], e["attempt"]) for e in after}
    assert any(e["type"] == "trial_finished" for e in events)
