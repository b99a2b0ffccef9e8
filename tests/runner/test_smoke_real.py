"""The real thing, briefly: the trial program and the searches through `aiperf-runner run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiperf_runner.run.state import RunState
from aiperf_runner.spec.eventlog import read_events
from aiperf_runner.spec.verify import verify

from tests.runner.conftest import SHORT_RUN_CHECKS, cli, failed_checks

pytest.importorskip("torch")


@pytest.mark.slow
def test_a_real_smoke_run_finishes_trials_and_verifies(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = cli("run", "--preset", "smoke", "--slots", "2", "--duration", "60s", "--out", str(run_dir),
              "--progress", "plain", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "run finished (duration)" in out.stdout
    state = RunState.load(run_dir)
    assert state.count("finished") >= 2, out.stdout
    assert state.best_accuracy() is not None and state.best_accuracy() > 0.3
    for tr in state.trials.values():
        assert (run_dir / "trials" / tr.trial / "graph.json").exists()
    assert not list(run_dir.glob("trials/*/checkpoint.pt*"))  # a finished run keeps none
    report = verify(run_dir)
    assert report["integrity_ok"] is True
    # The device model of each attempt's ranks, in its first epoch, copied into the main log.
    firsts = {}
    for ev in read_events(run_dir / "events.jsonl"):
        if ev["type"] == "epoch_end":
            firsts.setdefault((ev["trial"], ev["attempt"]), ev)
    assert firsts and all(ev.get("accelerators") == {"cpu": 1} for ev in firsts.values())
    assert report["system"]["accelerators_seen"] == {"cpu": len(firsts)}
    assert report["system"]["accelerators_not_registered"] == []
    assert failed_checks(report) <= SHORT_RUN_CHECKS, [c for c in report["checks"] if not c["passed"]]
    assert cli("verify", str(run_dir)).returncode == 0
    summary = json.loads(cli("report", str(run_dir), "--json").stdout)
    assert summary["trials_finished"] == state.count("finished")
    assert summary["slot_utilisation"] > 0.8
