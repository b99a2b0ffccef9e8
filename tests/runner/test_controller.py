"""The controller with a fast fake trial: slots kept busy, stop at the duration, failures retried."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiperf_runner.run.controller import Controller, ControllerError
from aiperf_runner.run.state import RunState
from aiperf_runner.spec.eventlog import read_events
from aiperf_runner.spec.verify import verify

from tests.backends.test_conformance import process_gone
from tests.helpers import REPO
from tests.runner.conftest import FAKE_TRIAL, SHORT_RUN_CHECKS, cli, config, failed_checks, run_controller


def trial_file_epochs(run_dir: Path) -> set[tuple[str, int]]:
    out = set()
    for path in (run_dir / "trials").glob("t*/events.jsonl"):
        for ev in read_events(path):
            if ev["type"] == "epoch_end":
                out.add((ev["trial"], ev["epoch"]))
    return out


def test_keeps_every_slot_busy(tmp_path: Path, fake_env) -> None:
    run_dir = tmp_path / "run"
    fake_env.setenv("FAKE_EPOCH_S", "0.3")
    run_controller(run_dir, slots=3, duration_s=8.0)
    events = read_events(run_dir / "events.jsonl")
    state = RunState.load(run_dir)
    assert events[0]["type"] == "run_started" and events[-1] == {**events[-1], "type": "run_finished",
                                                                 "reason": "duration"}
    assert state.count("finished") >= 6
    # Asynchronous refill: one slot's trial ends, the next starts on it, whatever the others do.
    util = state.slot_utilisation()
    assert util is not None and util > 0.9, util
    # Trials in proposal order, round = seq // slots, budget by round.
    for seq, tr in enumerate(state.trials.values()):
        assert tr.trial == f"t{seq:04d}"
        assert tr.round == seq // 3
        assert tr.epoch_budget == [1, 2, 3, 4][min(tr.round, 3)]
    # Every epoch a trial logged is in the main log, once.
    copied = [(e["trial"], e["epoch"]) for e in events if e["type"] == "epoch_end"]
    assert len(copied) == len(set(copied))
    assert set(copied) == trial_file_epochs(run_dir)
    # Each result went to the search with its own architecture.
    for tr in state.trials.values():
        if tr.status == "finished":
            assert tr.best_accuracy == max(e["val_accuracy"] for e in tr.epochs.values())
    assert failed_checks(verify(run_dir)) <= SHORT_RUN_CHECKS
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["config"]["slots"] == 3 and run_json["preset"] == "smoke"
    assert run_json["system"]["cpu_cores"] >= 1 and run_json["system"]["nodes"] == 1
    assert set(run_json["declared_peak_flops"]) == {"fp32", "tf32", "bf16", "fp16"}
    assert not (run_dir / "controller.lock").exists()


def test_stops_at_the_duration_and_cancels_running_trials(tmp_path: Path, fake_env) -> None:
    run_dir = tmp_path / "run"
    fake_env.setenv("FAKE_EPOCH_S", "0.5")
    t = time.monotonic()
    run_controller(run_dir, backend="local", duration_s=3.0, epoch_budgets=[100])
    assert time.monotonic() - t < 60
    events = read_events(run_dir / "events.jsonl")
    cancelled = [e for e in events if e["type"] == "trial_cancelled"]
    assert sorted(e["trial"] for e in cancelled) == ["t0000", "t0001"]
    assert all(e["reason"] == "duration" for e in cancelled)
    assert events[-1]["type"] == "run_finished" and events[-1]["reason"] == "duration"
    # Epochs done before the stop are kept; no trial process is left.
    assert {(e["trial"], e["epoch"]) for e in events if e["type"] == "epoch_end"} == trial_file_epochs(run_dir)
    assert any(e["type"] == "epoch_end" for e in events)
    pids = [int(p.read_text()) for p in (run_dir / "trials").glob("t*/fake_pid.*")]
    assert len(pids) == 2 and all(process_gone(p) for p in pids)
    assert not list((run_dir / "trials").glob("t*/pid"))


def test_failed_trials_are_retried_then_given_up(tmp_path: Path, fake_env) -> None:
    run_dir = tmp_path / "run"
    fake_env.setenv("FAKE_TRIAL_FAIL", "t0001@1")    # logs trial_error after its first epoch, once
    fake_env.setenv("FAKE_TRIAL_CRASH", "t0002@*")   # dies every time, nothing in its log
    run_controller(run_dir, backend="local", duration_s=8.0, max_retries=1, epoch_budgets=[3])
    events = read_events(run_dir / "events.jsonl")
    state = RunState.load(run_dir)

    def of(trial: str, kind: str) -> list[dict]:
        return [e for e in events if e.get("trial") == trial and e["type"] == kind]

    f1 = of("t0001", "trial_failed")
    assert [(e["attempt"], e["retry"]) for e in f1] == [(1, True)]
    assert "fake failure" in f1[0]["error"]
    assert [e["attempt"] for e in of("t0001", "trial_started")] == [1, 2]
    assert state.trials["t0001"].status == "finished"
    # The retry resumed after the epoch the failed attempt completed: each epoch once.
    assert [(e["attempt"], e["epoch"]) for e in of("t0001", "epoch_end")] == [(1, 1), (2, 2), (2, 3)]

    f2 = of("t0002", "trial_failed")
    assert [(e["attempt"], e["retry"]) for e in f2] == [(1, True), (2, False)]
    assert "exit status 9" in f2[0]["error"] and "fake crash of t0002" in f2[0]["error"]
    assert state.trials["t0002"].status == "failed"
    # The run went on past the failures.
    assert state.count("finished") >= 3
    assert any(tr.seq > 2 and tr.status == "finished" for tr in state.trials.values())
    assert failed_checks(verify(run_dir)) <= SHORT_RUN_CHECKS


def test_a_backend_that_cannot_launch_stops_the_run(tmp_path: Path, fake_env) -> None:
    from aiperf_runner.run import controller as ctl

    run_dir = tmp_path / "run"
    controller = Controller.create(config(duration_s=60.0, max_retries=1), run_dir)
    real_launch, calls = controller.backend.launch, []

    def launch(spec, slot):
        calls.append(spec.trial_id)
        if len(calls) in (1, 3):  # an occasional refusal is the attempt's failure, then the run goes on
            raise OSError("sbatch: Socket timed out")
        if len(calls) >= 4:
            raise OSError("sbatch: invalid partition specified")
        return real_launch(spec, slot)

    controller.backend.launch = launch
    with pytest.raises(ControllerError, match="failed to launch 8 attempts in a row.*invalid partition"):
        controller.run()
    assert len(calls) == 2 + ctl.LAUNCH_FAILURES_IN_A_ROW  # the count restarted after call 2
    events = read_events(run_dir / "events.jsonl")
    assert events[-1]["type"] == "run_finished" and "invalid partition" in events[-1]["error"]
    assert verify(run_dir)["integrity_ok"]


def test_stop_request_cancels_and_finishes(tmp_path: Path, fake_env) -> None:
    run_dir = tmp_path / "run"
    controller = Controller.create(config(duration_s=60.0, epoch_budgets=[100]), run_dir)
    controller.request_stop()
    assert controller.run() == "stopped"
    events = read_events(run_dir / "events.jsonl")
    assert events[-1]["reason"] == "stopped"


def test_refuses_a_directory_with_a_run_and_a_second_controller(tmp_path: Path, fake_env) -> None:
    run_dir = tmp_path / "run"
    controller = Controller.create(config(duration_s=60.0), run_dir)
    try:
        with pytest.raises(ControllerError, match="already holds a run"):
            Controller.create(config(), run_dir)
        with pytest.raises(ControllerError, match="another controller"):
            Controller.resume(run_dir)
    finally:
        controller.request_stop()
        controller.run()
    with pytest.raises(ControllerError, match="already finished"):
        Controller.resume(run_dir)


def test_sigterm_stops_the_run_cleanly(tmp_path: Path, fake_env) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiperf_runner", "run", "--preset", "smoke", "--slots", "2", "--duration", "10m",
         "--out", str(run_dir), "--trial-module", FAKE_TRIAL, "--progress", "plain",
         "--system-name", " Test Rig 1 ", "--interconnect", "10GbE"],
        cwd=REPO, env={**os.environ, "FAKE_EPOCH_S": "1.0"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        log = run_dir / "events.jsonl"
        while not (log.exists() and b'"type":"epoch_end"' in log.read_bytes()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        status = json.loads(cli("status", str(run_dir), "--json").stdout)
        assert status["status"] == "running" and status["controller_pid"] == proc.pid
        assert status["slots_busy"] >= 1 and status["remaining_s"] > 0
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert b"run finished (stopped)" in out
    events = read_events(run_dir / "events.jsonl")
    assert events[-1]["type"] == "run_finished" and events[-1]["reason"] == "stopped"
    cancelled = [e for e in events if e["type"] == "trial_cancelled"]
    assert cancelled and all(e["reason"] == "stop" for e in cancelled)
    pids = [int(p.read_text()) for p in (run_dir / "trials").glob("t*/fake_pid.*")]
    assert pids and all(process_gone(p) for p in pids)
    system = json.loads((run_dir / "run.json").read_text())["system"]
    assert system["name"] == "Test Rig 1" and system["interconnect"] == "10GbE"


def test_checkpoints_kept_for_a_retry_and_deleted_when_a_trial_is_over(tmp_path: Path, fake_env) -> None:
    """About 6 s. The fake trial leaves its checkpoint behind (as a real one killed in teardown would)."""
    seen: list[tuple[str, str, bool]] = []  # (trial, moment, checkpoint there?)

    class Watched(Controller):
        def _there(self, trial: str) -> bool:
            return (self.run_dir / "trials" / trial / "checkpoint.pt").exists()

        def _launch(self, tr, slot) -> bool:
            if tr.status == "retry":
                seen.append((tr.trial, "retry launched", self._there(tr.trial)))
            return super()._launch(tr, slot)

        def _failed(self, tr, attempt, error, **kw) -> None:
            super()._failed(tr, attempt, error, **kw)
            seen.append((tr.trial, tr.status, self._there(tr.trial)))

        def _finished(self, tr, attempt, result) -> None:
            super()._finished(tr, attempt, result)
            seen.append((tr.trial, tr.status, self._there(tr.trial)))

    fake_env.setenv("FAKE_CHECKPOINT", "1")
    fake_env.setenv("FAKE_TRIAL_FAIL", "t0001@1,t0002@*")  # t0001 fails once, t0002 every time (after epoch 1)
    run_dir = tmp_path / "run"
    Watched.create(config(duration_s=6.0, max_retries=1, epoch_budgets=[3]), run_dir).run()
    state = RunState.load(run_dir)
    assert state.trials["t0001"].status == "finished" and state.trials["t0002"].status == "failed"
    for trial in ("t0001", "t0002"):  # the failed attempt's checkpoint waited for its retry
        assert (trial, "retry", True) in seen and (trial, "retry launched", True) in seen
    assert ("t0002", "failed", False) in seen  # given up: gone at once
    ended = [s for s in seen if s[1] == "finished"]
    assert len(ended) >= 3 and not any(there for _, _, there in ended)
    # Cancelled at the duration or waiting for a retry: a finished run needs none of them.
    assert not list(run_dir.glob("trials/*/checkpoint.pt*"))
    assert list(run_dir.glob("trials/*/weights.safetensors")), "the kept weights are not checkpoints"


def test_trials_get_the_runs_lr_scaling_and_cpu_binding(tmp_path: Path, fake_env) -> None:
    run_dir = tmp_path / "run"
    run_controller(run_dir, slots=1, duration_s=2.0, cpu_bind=False, lr_reference_batch=256, lr_warmup_epochs=2.5)
    saved = json.loads((run_dir / "run.json").read_text())["config"]
    assert (saved["cpu_bind"], saved["lr_scaling"], saved["lr_reference_batch"], saved["lr_warmup_epochs"]) == \
        (False, "linear", 256, 2.5)
    trial = json.loads((run_dir / "trials" / "t0000" / "trial.json").read_text())
    assert trial["cpu_bind"] is False
    assert trial["lr_scaling"] == {"rule": "linear", "reference_batch": 256, "warmup_epochs": 2.5}
    with pytest.raises(ControllerError, match="lr-scaling"):
        Controller.create(config(lr_scaling="sqrt"), tmp_path / "bad")


def test_the_runs_image_decoder_is_recorded_and_passed_to_trials(tmp_path: Path, fake_env) -> None:
    """$AIPERF_DATA_DECODER at the start (default `tensor`): run.json and every trial.json (train/decode.py)."""
    fake_env.delenv("AIPERF_DATA_DECODER", raising=False)
    run_controller(tmp_path / "a", slots=1, duration_s=1.0)
    assert json.loads((tmp_path / "a" / "run.json").read_text())["data_decoder"] == "tensor"
    fake_env.setenv("AIPERF_DATA_DECODER", "pil")
    run_controller(tmp_path / "b", slots=1, duration_s=2.0)
    run_json = json.loads((tmp_path / "b" / "run.json").read_text())
    assert run_json["data_decoder"] == run_json["config"]["data_decoder"] == "pil"
    assert json.loads((tmp_path / "b" / "trials" / "t0000" / "trial.json").read_text())["data_decoder"] == "pil"
    fake_env.setenv("AIPERF_DATA_DECODER", "simd")
    with pytest.raises(ControllerError, match="AIPERF_DATA_DECODER"):
        Controller.create(config(), tmp_path / "c")


def test_precision_auto_is_bf16_for_imagenet_on_gpus_and_fp32_elsewhere(tmp_path: Path, fake_env) -> None:
    """`--precision auto` (the default) is resolved once the slots' devices are known, before run.json: fp32 on
    this CPU, written as such to run.json, its config and every trial.json; an explicit precision is kept."""
    from aiperf_runner.rundir.config import RunConfig, auto_precision

    assert auto_precision("imagenet", "cuda") == "bf16"
    assert [auto_precision("imagenet", "cpu"), auto_precision("smoke", "cuda")] == ["fp32", "fp32"]
    assert RunConfig().precision == "auto"
    run_controller(tmp_path / "a", slots=1, duration_s=1.0)
    run_json = json.loads((tmp_path / "a" / "run.json").read_text())
    assert run_json["precision"] == run_json["config"]["precision"] == run_json["tuning"]["precision"] == "fp32"
    assert run_json["tuning"] == {"precision": "fp32", "data_decoder": run_json["data_decoder"],
                                  "data_workers": os.environ.get("AIPERF_DATA_WORKERS") or "auto",
                                  "channels_last": True, "torch_compile": False, "cuda_graphs": False}
    assert json.loads((tmp_path / "a" / "trials" / "t0000" / "trial.json").read_text())["precision"] == "fp32"
    with pytest.raises(ControllerError, match="--precision must be auto or one of"):
        RunConfig(precision="fp8").check()
