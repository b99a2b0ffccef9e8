"""The asynchronous checkpoint (train/ckptwriter.py) and the trial's timing lines (rundir/timings.py).

A write in a thread keeps the synchronous order on disk: the checkpoint is in place before its
epoch is logged, a failed or interrupted write leaves the previous checkpoint whole and logs
nothing, and a retry resumes from what is on disk. The trial prints, on rank 0, its start-up and
each epoch's validation and checkpoint seconds."""

from __future__ import annotations

import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
from aiperf_runner.rundir import timings
from aiperf_runner.spec.eventlog import read_events
from aiperf_runner.train import trial as trial_mod
from aiperf_runner.train.ckptwriter import SYNC_ENV, CheckpointError, CheckpointWriter, cpu_copy
from aiperf_runner.train.trial import CHECKPOINT, DistEnv, load_checkpoint, run_trial, save_checkpoint

from tests.train.conftest import run_trial_program, write_trial_dir


def _epochs(d: Path) -> list[tuple[int, int]]:
    return [(e["epoch"], e["attempt"]) for e in read_events(d / "events.jsonl") if e["type"] == "epoch_end"]


# ---- the writer ------------------------------------------------------------------------------------

def test_the_copy_is_deep_and_keeps_a_state_dicts_metadata() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    state = {"model": model.state_dict(), "n": 3, "pair": (torch.ones(2), [torch.zeros(1)])}
    copy = cpu_copy(state)
    with torch.no_grad():
        model[0].weight.add_(1.0)
    state["pair"][0].add_(1.0)
    assert not torch.equal(copy["model"]["0.weight"], model[0].weight)
    assert torch.equal(copy["pair"][0], torch.ones(2)) and copy["n"] == 3
    assert isinstance(copy["model"], OrderedDict) and copy["model"]._metadata == state["model"]._metadata
    model.load_state_dict(copy["model"])  # loads as the live state dict does


def test_the_epoch_is_logged_after_its_checkpoint_is_in_place(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT
    seen: list[Any] = []

    def slow_write(p: Path, state: dict[str, Any]) -> None:
        time.sleep(0.2)
        save_checkpoint(p, state)

    ckw = CheckpointWriter(path, slow_write, asynchronous=True)
    t0 = time.perf_counter()
    ckw.save({"epoch": 1, "w": torch.ones(3)}, then=lambda: seen.append(load_checkpoint(path)["epoch"]))
    assert time.perf_counter() - t0 < 0.15 and seen == []  # the loop goes on while it writes
    waited = ckw.save({"epoch": 2, "w": torch.ones(3)}, then=lambda: seen.append(load_checkpoint(path)["epoch"]))
    assert waited > 0.05 and seen == [1]  # one write at a time: the second waited for the first
    ckw.wait()
    assert seen == [1, 2] and len(ckw.writes_s) == 2 and all(w > 0 for w in ckw.writes_s)
    assert not path.with_name(CHECKPOINT + ".tmp").exists()


@pytest.mark.parametrize("asynchronous", [True, False])
def test_a_failed_write_keeps_the_previous_checkpoint_and_logs_nothing(tmp_path: Path, asynchronous: bool) -> None:
    path = tmp_path / CHECKPOINT
    save_checkpoint(path, {"epoch": 1})
    logged: list[int] = []

    def dies_mid_write(p: Path, state: dict[str, Any]) -> None:
        with open(p.with_name(p.name + ".tmp"), "wb") as fh:  # what a full disk or a kill leaves
            fh.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")

    ckw = CheckpointWriter(path, dies_mid_write, asynchronous=asynchronous)
    # Synchronous: the write's own error, as before; asynchronous: at the next wait.
    with pytest.raises(CheckpointError if asynchronous else OSError, match="No space left"):
        ckw.save({"epoch": 2}, then=lambda: logged.append(2))
        ckw.wait()
    assert logged == [] and load_checkpoint(path) == {"epoch": 1}
    assert ckw.close() is None  # the error was handed over once


def test_close_returns_the_error_of_the_write_in_flight(tmp_path: Path) -> None:
    def fails(p: Path, state: dict[str, Any]) -> None:
        raise OSError("gone")

    ckw = CheckpointWriter(tmp_path / CHECKPOINT, fails, asynchronous=True)
    ckw.save({}, then=lambda: None)
    assert isinstance(ckw.close(), CheckpointError)


# ---- in the trial program ------------------------------------------------------------------------

FAILING_WRITE = """
import sys
from aiperf_runner.train import trial
save = trial.save_checkpoint
calls = []
def failing_save(path, state):
    calls.append(1)
    if len(calls) == 2:
        with open(str(path) + ".tmp", "wb") as fh:
            fh.write(b"half")
        raise OSError(28, "No space left on device")
    save(path, state)
trial.save_checkpoint = failing_save
sys.exit(trial.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_failed_async_write_fails_the_attempt_and_the_retry_resumes(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0020", epoch_budget=3)
    first = run_trial_program(d, "--attempt", "1", code=FAILING_WRITE)
    assert first.returncode == 1
    events = read_events(d / "events.jsonl")
    assert _epochs(d) == [(1, 1)]  # epoch 2's write failed: not logged
    assert events[-1]["type"] == "trial_error" and "No space left" in events[-1]["error"]
    assert load_checkpoint(d / CHECKPOINT)["progress"]["epoch"] == 1  # the previous checkpoint, whole

    second = run_trial_program(d, "--attempt", "2")
    assert second.returncode == 0, second.stderr
    assert "resuming after epoch 1" in second.stdout
    assert _epochs(d) == [(1, 1), (2, 2), (3, 2)]
    assert not (d / CHECKPOINT).exists() and not (d / (CHECKPOINT + ".tmp")).exists()


def test_a_failing_attempt_logs_the_epoch_in_flight_before_its_error(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    real_save, real_evaluate = trial_mod.save_checkpoint, trial_mod.evaluate
    calls: list[int] = []

    def slow_save(path: Path, state: dict[str, Any]) -> None:
        time.sleep(0.3)  # still writing epoch 1 when epoch 2 fails
        real_save(path, state)

    def evaluate(*args: Any) -> torch.Tensor:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("evaluation broke")
        return real_evaluate(*args)

    monkeypatch.setattr(trial_mod, "save_checkpoint", slow_save)
    monkeypatch.setattr(trial_mod, "evaluate", evaluate)
    d = write_trial_dir(tmp_path / "t0021", epoch_budget=3)
    assert run_trial(d, 1, DistEnv()) == 1
    assert [e["type"] for e in read_events(d / "events.jsonl")] == ["epoch_end", "trial_error"]
    assert load_checkpoint(d / CHECKPOINT)["progress"]["epoch"] == 1


def _run_timed(d: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
               sync: bool) -> list[dict[str, Any]]:
    monkeypatch.setenv(timings.LAUNCHED_AT_ENV, repr(time.time()))
    monkeypatch.setenv(SYNC_ENV, "1" if sync else "0")
    capsys.readouterr()
    assert run_trial(d, 1, DistEnv()) == 0
    out = d / "stdout.log"
    out.write_text(capsys.readouterr().out)
    return list(timings.read(out))


def test_timing_lines_and_the_same_training_either_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    runs = {}
    for sync in (False, True):
        d = write_trial_dir(tmp_path / ("sync" if sync else "async") / "t0022", epoch_budget=3)
        facts = _run_timed(d, monkeypatch, capsys, sync)
        assert [f["kind"] for f in facts] == ["start", "epoch", "epoch", "epoch", "end"]
        start, epochs, end = facts[0], facts[1:4], facts[4]
        assert start["launched_at"] <= start["ready_at"] <= start["first_step_at"] and start["startup_s"] > 0
        for f in epochs:
            assert f["train_s"] > 0 and f["val_s"] > 0 and f["checkpoint_s"] > 0
            assert f["checkpoint"] == ("sync" if sync else "async") and f["attempt"] == 1
        assert len(end["writes_s"]) == 3 and all(w > 0 for w in end["writes_s"]) and end["checkpoint_s"] >= 0
        events = read_events(d / "events.jsonl")
        runs[sync] = [{k: v for k, v in e.items() if k not in ("t", "prev", "started_at", "ended_at", "seconds")}
                      for e in events]
    assert runs[True] == runs[False]  # same epochs, same accuracies, same final weights (their digest)


def test_a_trial_started_by_hand_counts_from_its_process_start(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(timings.LAUNCHED_AT_ENV, raising=False)
    out = tmp_path / "stdout.log"
    times = timings.AttemptTimes(2, emit=lambda text: out.write_text(f"other output\n{text}\n{timings.PREFIX}{{cut"))
    assert times.launched_at is not None and times.launched_at <= time.time()
    times.ready()
    times.first_step()
    [fact] = timings.read(out)  # the other line and the broken one skipped
    assert fact["kind"] == "start" and fact["attempt"] == 2 and fact["startup_s"] > 0
    assert fact["launched_at"] == fact["process_at"]
