"""Which trials keep their final weights (spec/retention.py, run/weightkeeper.py), with fast fake trials."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.run.state import RunState
from aiperf_runner.spec.retention import WEIGHTS, selected
from aiperf_runner.spec.verify import verify

from devdata.runfactory import rewrite_events
from tests.runner.conftest import run_controller


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


@pytest.fixture
def unwitnessed_run(fake_env, tmp_path: Path) -> Path:
    run_controller(tmp_path / "run", duration_s=4.0)
    return tmp_path / "run"


def on_disk(run: Path) -> set[str]:
    return {p.parent.name for p in (run / "trials").glob(f"*/{WEIGHTS}")}


def test_an_unwitnessed_run_keeps_the_best_trial_only(unwitnessed_run: Path) -> None:
    state = RunState.load(unwitnessed_run)
    finished = [tr for tr in state.trials.values() if tr.status == "finished"]
    assert len(finished) >= 3
    best = max(finished, key=lambda tr: tr.best_accuracy or 0.0)
    assert on_disk(unwitnessed_run) == {best.trial}
    assert {tr.trial for tr in finished if tr.weights == "kept"} == {best.trial}
    assert all(tr.weights == "dropped" for tr in finished if tr is not best)
    report = verify(unwitnessed_run)
    assert by_name(report)["audit.retention"]["passed"], by_name(report)["audit.retention"]
    assert set(report["kept_weights"]) == {best.trial} and report["best_trial"] == best.trial
    digest = hashlib.sha256((unwitnessed_run / "trials" / best.trial / WEIGHTS).read_bytes()).hexdigest()
    assert report["kept_weights"][best.trial]["sha256"] == digest


def test_a_log_that_dropped_the_best_trial_fails_retention(unwitnessed_run: Path) -> None:
    best = verify(unwitnessed_run)["best_trial"]

    def drop_best(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in events:
            if e["type"] == "weights_kept" and e["trial"] == best:
                e.clear()
                e.update({"type": "weights_dropped", "trial": best, "reason": "unwitnessed", "seq": 0, "t": 0.0,
                          "prev": ""})
        return events
    rewrite_events(unwitnessed_run, drop_best)
    check = by_name(verify(unwitnessed_run))["audit.retention"]
    assert not check["passed"] and best in check["message"]


def test_weights_said_kept_by_a_beacon_that_never_was_fail_retention(unwitnessed_run: Path) -> None:
    def claim_beacon(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in events:
            if e["type"] == "weights_dropped":
                e.update(type="weights_kept", reason="beacon",
                         sha256=next(x["weights_sha256"] for x in events
                                     if x["type"] == "trial_finished" and x["trial"] == e["trial"]))
                return events
        raise AssertionError("no dropped trial")
    rewrite_events(unwitnessed_run, claim_beacon)
    check = by_name(verify(unwitnessed_run))["audit.retention"]
    assert not check["passed"] and "did not select" in check["message"]


@pytest.mark.parametrize("share", [0.01, 0.05])
def test_a_beacon_selects_its_share_of_trials(share: float) -> None:
    beacon = secrets.token_hex(32)
    trials = [f"t{i:04d}" for i in range(20_000)]
    picked = sum(selected(beacon, t, share) for t in trials) / len(trials)
    # Binomial: 20,000 draws; five standard deviations either side.
    sd = (share * (1 - share) / len(trials)) ** 0.5
    assert abs(picked - share) < 5 * sd
    other = secrets.token_hex(32)
    assert {t for t in trials if selected(beacon, t, share)} != {t for t in trials if selected(other, t, share)}
