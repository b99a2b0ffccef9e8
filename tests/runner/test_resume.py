"""Resume after the controller is killed: same run, chain intact, no epoch lost, orphans killed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from aiperf_runner.run.controller import Controller
from aiperf_runner.run.state import INTERRUPTED, RunState
from aiperf_runner.spec.eventlog import iter_events, read_events
from aiperf_runner.spec.verify import verify

from tests.backends.test_conformance import process_gone
from tests.helpers import REPO
from tests.runner.conftest import FAKE_TRIAL, SHORT_RUN_CHECKS, cli, config, failed_checks
from tests.runner.test_controller import trial_file_epochs


def epoch_keys(events: list[dict]) -> set[tuple[str, int]]:
    return {(e["trial"], e["epoch"]) for e in events if e["type"] == "epoch_end"}


def orphan_pids(run_dir: Path) -> list[int]:
    return [json.loads(p.read_text())["pid"] for p in (run_dir / "trials").glob("t*/pid")]


def check_resumed_log(run_dir: Path, before: bytes, done_before: set[tuple[str, int]]) -> list[dict]:
    events = read_events(run_dir / "events.jsonl")  # raises if the chain is broken
    raw = (run_dir / "events.jsonl").read_bytes()
    assert raw.startswith(before[: before.rfind(b"\n") + 1])  # history kept byte for byte
    run_ids = {e["run_id"] for e in events if e["type"] in ("run_started", "run_resumed")}
    assert len(run_ids) == 1
    assert [e["type"] for e in events].count("run_resumed") == 1
    assert events[-1]["type"] == "run_finished"
    assert done_before <= epoch_keys(events), done_before - epoch_keys(events)
    # The attempts the kill interrupted are recorded failed and retried with the next attempt number.
    resumed_at = next(i for i, e in enumerate(events) if e["type"] == "run_resumed")
    for e in events[resumed_at:]:
        if e["type"] == "trial_failed" and e["error"] == INTERRUPTED:
            assert e["retry"] is True
    assert failed_checks(verify(run_dir)) <= SHORT_RUN_CHECKS
    return events


def test_resume_after_a_crash_in_process(tmp_path: Path, fake_env) -> None:
    """A controller that dies mid-run (simulated: abandoned, with a line cut short) is resumed."""
    run_dir = tmp_path / "run"
    fake_env.setenv("FAKE_EPOCH_S", "0.3")
    fake_env.setenv("FAKE_CHECKPOINT", "1")
    c = Controller.create(config(backend="local", duration_s=10.0, epoch_budgets=[2, 100]), run_dir)
    t = time.monotonic()
    while time.monotonic() - t < 3.0:
        c._check_running()
        c._fill_slots()
        time.sleep(0.1)
    # Death: nothing is cleaned up; the trials run on; the last log line is half written.
    c.buffer.stop()
    c.writer.close()
    c._lock_fh.close()
    orphans = orphan_pids(run_dir)
    assert orphans and not all(process_gone(p) for p in orphans)
    before = (run_dir / "events.jsonl").read_bytes()
    with open(run_dir / "events.jsonl", "ab") as fh:
        fh.write(b'{"half a line')
    time.sleep(0.7)  # the orphans log another epoch the dead controller never copied
    done_before = trial_file_epochs(run_dir)
    copied = epoch_keys([e.data for e in iter_events(run_dir / "events.jsonl", allow_partial_tail=True)])
    assert done_before - copied  # epochs the dead controller never copied

    # Killed between logging a trial's end and deleting its checkpoint: the resume deletes it;
    # the interrupted attempts' checkpoints stay for their retries.
    dead = RunState.load(run_dir)
    over = [t for t, tr in dead.trials.items() if tr.status == "finished"]
    assert over
    (run_dir / "trials" / over[0] / "checkpoint.pt").write_bytes(b"left behind")
    resuming = [run_dir / "trials" / a.trial / "checkpoint.pt" for a in dead.running()]
    assert resuming and all(p.exists() for p in resuming)

    r = Controller.resume(run_dir)
    assert all(process_gone(p) for p in orphans)
    assert not (run_dir / "trials" / over[0] / "checkpoint.pt").exists()
    assert all(p.exists() for p in resuming)
    assert r.run() == "duration"
    assert not list(run_dir.glob("trials/*/checkpoint.pt*"))
    events = check_resumed_log(run_dir, before, done_before)
    interrupted = [e for e in events if e["type"] == "trial_failed" and e["error"] == INTERRUPTED]
    assert interrupted
    for e in interrupted:
        restarts = [x for x in events if x["type"] == "trial_started" and x["trial"] == e["trial"]]
        assert e["attempt"] + 1 in [x["attempt"] for x in restarts]
        # The retry continued after the last epoch the interrupted attempt completed.
        epochs = [x["epoch"] for x in events if x["type"] == "epoch_end" and x["trial"] == e["trial"]]
        assert epochs == list(range(1, len(epochs) + 1))
    state = RunState.load(run_dir)
    assert state.count("finished") >= 2 and not state.running()


def test_resume_after_the_duration_only_closes_the_run(tmp_path: Path, fake_env) -> None:
    run_dir = tmp_path / "run"
    c = Controller.create(config(backend="local", duration_s=2.0, epoch_budgets=[100]), run_dir)
    c._fill_slots()
    c.buffer.stop()
    c.writer.close()
    c._lock_fh.close()
    time.sleep(2.5)
    r = Controller.resume(run_dir)
    assert r.run() == "duration"
    events = read_events(run_dir / "events.jsonl")
    assert [e["type"] for e in events].count("trial_started") == 2  # nothing new started
    assert [e["error"] for e in events if e["type"] == "trial_failed"] == [INTERRUPTED, INTERRUPTED]
    assert not orphan_pids(run_dir)


def test_resume_after_sigkill_of_the_controller(tmp_path: Path, fake_env) -> None:
    """The real thing: `aiperf-runner run` killed with SIGKILL at a random moment, then --resume."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "FAKE_EPOCH_S": "0.4"}
    controller = subprocess.Popen(
        [sys.executable, "-m", "aiperf_runner", "run", "--preset", "smoke", "--slots", "2", "--duration", "15s",
         "--out", str(run_dir), "--trial-module", FAKE_TRIAL, "--progress", "plain"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            log = run_dir / "events.jsonl"
            if log.exists() and log.read_bytes().count(b'"type":"epoch_end"') >= 2:
                break
            assert controller.poll() is None, controller.stderr.read() if controller.stderr else ""
            time.sleep(0.1)
        time.sleep(random.uniform(0.0, 4.0))
        controller.send_signal(signal.SIGKILL)
        controller.wait()
    finally:
        if controller.poll() is None:
            controller.kill()
    before = (run_dir / "events.jsonl").read_bytes()
    done_before = trial_file_epochs(run_dir)
    orphans = orphan_pids(run_dir)

    status = json.loads(cli("status", str(run_dir), "--json", env=env).stdout)
    assert status["status"] == "interrupted"

    resumed = cli("run", "--resume", str(run_dir), "--progress", "plain", env=env, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    assert all(process_gone(p) for p in orphans)
    events = check_resumed_log(run_dir, before, done_before)
    assert events[-1]["reason"] == "duration"
    assert not (run_dir / "controller.lock").exists()


def test_a_run_from_before_lr_scaling_resumes_unscaled(tmp_path: Path, fake_env) -> None:
    run_dir = tmp_path / "run"
    c = Controller.create(config(duration_s=60.0), run_dir)
    c.buffer.stop()
    c.writer.close()
    c._lock_fh.close()
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["config"]["lr_scaling"] == "linear"
    del run_json["config"]["lr_scaling"]  # as an older runner wrote it
    (run_dir / "run.json").write_text(json.dumps(run_json))
    r = Controller.resume(run_dir)
    assert r.config.lr_scaling == "none"  # its trials keep the rate they were searched at
    r.request_stop("stopped")
    assert r.run() == "stopped"


def test_a_resumed_run_keeps_excluding_the_nodes_it_lost(tmp_path: Path, fake_env, monkeypatch) -> None:
    """slot_lost names the node by its pseudonym; the resumed controller excludes the node again
    (by its raw name) and never fills the slot lost with it (5 s)."""
    from aiperf_runner.backends.inprocess import InProcessBackend

    excluded: list[str] = []

    def exclude_node(self, node, free):
        excluded.append(node)
        return {1}

    monkeypatch.setattr(InProcessBackend, "exclude_node", exclude_node, raising=False)
    run_dir = tmp_path / "run"
    c = Controller.create(config(backend="inprocess", duration_s=4.0, epoch_budgets=[1]), run_dir)
    c._lose_node("gpu17.example.org", "the staged data was refused on node gpu17.example.org: ...")
    (lost,) = [e for e in read_events(run_dir / "events.jsonl") if e["type"] == "slot_lost"]
    assert lost["slot"] == 1 and lost["node"].startswith("node-") and "gpu17" not in lost["reason"]
    c.buffer.stop()  # the controller dies here
    c.writer.close()
    c._lock_fh.close()
    r = Controller.resume(run_dir)
    assert excluded == ["gpu17.example.org", "gpu17.example.org"] and r._free == [0]
    assert r.run() == "duration"
    events = read_events(run_dir / "events.jsonl")
    assert [e["type"] for e in events].count("slot_lost") == 1  # not logged again
    started = [e for e in events if e["type"] == "trial_started"]
    assert len(started) >= 2 and {e["slot"] for e in started} == {0}
    report = verify(run_dir)
    assert report["integrity_ok"] and "plausibility.slot_exclusive" not in failed_checks(report)
