"""Launches that may block go out beside the controller's loop (`Backend.launch_workers`): while one
hangs, the loop goes on copying epochs and closing attempts; a failed one is its attempt's
failure; one still in flight at the end never started as far as the log says, and its attempt is
stopped by the shutdown without holding up `run_finished`."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.backends.base import LaunchSpec, Slot
from aiperf_runner.backends.inprocess import InProcessBackend, InProcessHandle
from aiperf_runner.run import startup

from tests.runner.conftest import run_controller

HANG_S = 3.0


class BlockingBackend(InProcessBackend):
    """The inprocess backend with a submit that hangs, or fails, for the trials a test names."""

    name = "blocking"
    launch_workers = 2
    hang: dict[str, float] = {}  # trial id -> seconds its first attempt's submit blocks
    refuse: set[str] = set()  # trial ids whose first attempt's submit fails
    lock = threading.Lock()
    made: list[InProcessHandle] = []

    def submit(self, spec: LaunchSpec, slot: Slot) -> InProcessHandle:
        if spec.attempt == 1:
            time.sleep(self.hang.get(spec.trial_id, 0.0))
            if spec.trial_id in self.refuse:
                raise RuntimeError("sbatch: error: Batch job submission failed: Socket timed out")
        with self.lock:
            handle = self.launch(spec, slot)
            self.made.append(handle)
            return handle


@pytest.fixture
def blocking(monkeypatch: pytest.MonkeyPatch, fake_env: pytest.MonkeyPatch) -> type[BlockingBackend]:
    real = startup.load_backend
    monkeypatch.setattr(startup, "load_backend", lambda name: BlockingBackend if name == "blocking" else real(name))
    monkeypatch.setattr(BlockingBackend, "hang", {})
    monkeypatch.setattr(BlockingBackend, "refuse", set())
    monkeypatch.setattr(BlockingBackend, "made", [])
    return BlockingBackend


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_a_hung_launch_holds_up_neither_the_epochs_nor_the_other_slots(tmp_path: Path, blocking: Any) -> None:
    blocking.hang["t0001"] = HANG_S  # slot 1's first launch
    run_dir = tmp_path / "run"
    run_controller(run_dir, backend="blocking", slots=2, duration_s=6.0, epoch_budgets=[2])
    log = events(run_dir)
    start = log[0]["t"]
    started = {e["trial"]: e for e in log if e["type"] == "trial_started" and e["attempt"] == 1}
    # The hung trial starts once its launch returns; slot 0 ran trials meanwhile.
    assert started["t0001"]["t"] - start >= HANG_S - 0.1
    during = [e for e in log if e["type"] == "epoch_end" and e["t"] < start + HANG_S]
    assert {e["trial"] for e in during} >= {"t0000"} and all(e["trial"] != "t0001" for e in during)
    assert any(e["type"] == "trial_finished" and e["t"] < start + HANG_S for e in log)
    # Each epoch is in the controller's log within a moment of its end (a loop waiting on the
    # launch would copy the epochs ended meanwhile up to HANG_S late).
    lag = max(e["t"] - e["ended_at"] for e in log if e["type"] == "epoch_end")
    assert lag < 1.0, lag
    assert log[-1]["type"] == "run_finished" and log[-1]["reason"] == "duration"


def test_a_failed_launch_is_the_attempts_failure_and_retried(tmp_path: Path, blocking: Any) -> None:
    blocking.refuse.add("t0000")
    run_dir = tmp_path / "run"
    run_controller(run_dir, backend="blocking", slots=2, duration_s=4.0, epoch_budgets=[2])
    log = events(run_dir)
    first = [e for e in log if e.get("trial") == "t0000" and e["type"] in ("trial_started", "trial_failed")]
    assert [(e["type"], e["attempt"]) for e in first[:3]] == [("trial_started", 1), ("trial_failed", 1),
                                                               ("trial_started", 2)]
    assert first[1]["error"].startswith("launch failed: RuntimeError: sbatch: error") and first[1]["retry"]
    assert any(e["type"] == "trial_finished" and e["trial"] == "t0000" for e in log)


def test_a_launch_in_flight_at_the_end_never_started_and_holds_up_nothing(tmp_path: Path, blocking: Any) -> None:
    blocking.hang["t0001"] = 5.0  # returns 3 s after the end
    run_dir = tmp_path / "run"
    began = time.monotonic()
    run_controller(run_dir, backend="blocking", slots=2, duration_s=2.0, epoch_budgets=[20])
    log = events(run_dir)
    assert log[-1]["type"] == "run_finished" and log[-1]["t"] - log[0]["t"] < 2.0 + 1.0
    assert not [e for e in log if e.get("trial") == "t0001" and e["type"] != "trial_proposed"]
    # The controller waited for the launch, then the shutdown stopped its attempt (20 epochs of
    # 0.2 s would still be running).
    assert time.monotonic() - began >= 5.0
    late = [h for h in blocking.made if h.spec.trial_id == "t0001"]
    assert len(late) == 1 and late[0].poll() is not None
