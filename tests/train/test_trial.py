"""The trial program end to end: events, checkpoint, resume after a crash, failures, precisions."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from aiperf_runner.spec import schema
from aiperf_runner.spec.eventlog import EventWriter, read_events
from aiperf_runner.spec.records import EpochEnd
from aiperf_runner.train import distenv as distenv_mod
from aiperf_runner.train import trial as trial_mod
from aiperf_runner.train.trial import CHECKPOINT, CosineSchedule, DistEnv, TrialError, detect_dist_env, run_trial

from tests.train.conftest import TINY_DATASET, run_trial_program, write_trial_dir

EPOCH_FIELDS = {"trial", "attempt", "epoch", "images_trained", "images_evaluated", "val_accuracy", "val_loss",
                "started_at", "ended_at", "seconds"}


def _check_epochs(events: list[dict], epochs: list[int]) -> None:
    ends = [e for e in events if e["type"] == "epoch_end"]
    assert [e["epoch"] for e in ends] == epochs
    for e in ends:
        assert EPOCH_FIELDS <= set(e), set(e) ^ EPOCH_FIELDS
        assert e["images_trained"] == TINY_DATASET["train_images"]
        assert e["images_evaluated"] == TINY_DATASET["val_images"]
        assert 0.0 <= e["val_accuracy"] <= 1.0 and e["val_loss"] > 0
        assert e["started_at"] < e["ended_at"] and e["seconds"] > 0


@pytest.mark.slow
def test_trial_program_end_to_end(trial_dir: Path) -> None:
    proc = run_trial_program(trial_dir, "--attempt", "1")
    assert proc.returncode == 0, proc.stderr
    events = read_events(trial_dir / "events.jsonl")  # raises if the chain is broken
    _check_epochs(events, [1, 2])
    result = events[-1]
    assert result["type"] == "trial_result"
    assert result == {**result, "trial": "t0001", "attempt": 1, "epochs": 2, "reason": "budget"}
    assert result["best_accuracy"] == max(e["val_accuracy"] for e in events[:-1])
    assert not (trial_dir / CHECKPOINT).exists()
    assert "epoch 2/2" in proc.stdout


# A wrapper that runs the real program but dies (like a killed node) around a checkpoint write.
CRASH = """
import os, sys
from aiperf_runner.train import trial
save = trial.save_checkpoint
calls = []
def crashing_save(path, state):
    calls.append(1)
    if {before} and len(calls) == {n}:
        os._exit(137)  # killed while training epoch n: epochs 1..n-1 are logged and checkpointed
    save(path, state)
    if not {before} and len(calls) == {n}:
        os._exit(137)  # killed after saving epoch n's checkpoint, before logging it
trial.save_checkpoint = crashing_save
sys.exit(trial.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_resume_after_crash_continues_at_next_epoch(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0002", epoch_budget=3)
    first = run_trial_program(d, "--attempt", "1", code=CRASH.format(before=True, n=2))
    assert first.returncode == 137
    assert (d / CHECKPOINT).exists()
    _check_epochs(read_events(d / "events.jsonl"), [1])

    second = run_trial_program(d, "--attempt", "2")
    assert second.returncode == 0, second.stderr
    assert "resuming after epoch 1" in second.stdout
    events = read_events(d / "events.jsonl")
    _check_epochs(events, [1, 2, 3])  # epoch 1 is not trained or logged again
    assert [e["attempt"] for e in events if e["type"] == "epoch_end"] == [1, 2, 2]
    # The device model of every rank, in the first epoch each attempt logged (schema-valid, optional).
    assert [e.get("accelerators") for e in events if e["type"] == "epoch_end"] == [{"cpu": 1}, {"cpu": 1}, None]
    assert all(schema.problem(e, schema.TRIAL) is None for e in events)
    assert events[-1]["type"] == "trial_result" and events[-1]["epochs"] == 3 and events[-1]["attempt"] == 2
    assert not (d / CHECKPOINT).exists()


@pytest.mark.slow
def test_crash_between_checkpoint_and_log_logs_the_epoch_once(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0003", epoch_budget=3)
    first = run_trial_program(d, "--attempt", "1", code=CRASH.format(before=False, n=2))
    assert first.returncode == 137
    _check_epochs(read_events(d / "events.jsonl"), [1])  # epoch 2 trained and saved, not yet logged

    second = run_trial_program(d, "--attempt", "2")
    assert second.returncode == 0, second.stderr
    events = read_events(d / "events.jsonl")
    _check_epochs(events, [1, 2, 3])
    # Epoch 2 was trained by attempt 1: its line says so, with attempt 1's timestamps.
    assert [e["attempt"] for e in events if e["type"] == "epoch_end"] == [1, 1, 2]

    # Running a finished trial again changes nothing.
    third = run_trial_program(d, "--attempt", "3")
    assert third.returncode == 0
    assert read_events(d / "events.jsonl") == events


@pytest.mark.slow
def test_failure_writes_trial_error_and_exits_non_zero(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0004", image_size=24)  # graph built for 16x16 images
    proc = run_trial_program(d, "--attempt", "2")
    assert proc.returncode != 0
    events = read_events(d / "events.jsonl")
    assert [e["type"] for e in events] == ["trial_error"]
    assert events[0]["trial"] == "t0004" and events[0]["attempt"] == 2
    assert "does not match" in events[0]["error"]
    assert "Traceback" in proc.stderr


def test_failure_during_training(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0005", preset="cifar", data=str(tmp_path / "missing"),
                        dataset={"name": "cifar"})
    assert run_trial(d, 1, DistEnv()) == 1
    events = read_events(d / "events.jsonl")
    assert events[-1]["type"] == "trial_error" and "no train/ directory" in events[-1]["error"]
    (d / "hparams.json").write_text("{not json")
    assert run_trial(d, 2, DistEnv()) == 1
    assert "not valid JSON" in read_events(d / "events.jsonl")[-1]["error"]


def test_logged_epochs_without_checkpoint_are_refused(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0006")
    with EventWriter(d / "events.jsonl") as w:
        w.append("epoch_end", **EpochEnd(trial="t0006", attempt=1, epoch=1, images_trained=1, images_evaluated=1,
                                         val_accuracy=0.1, val_loss=2.0, started_at=1.0, ended_at=2.0,
                                         seconds=1.0).as_event())
    assert run_trial(d, 2, DistEnv()) == 1
    last = read_events(d / "events.jsonl")[-1]
    assert last["type"] == "trial_error" and "twice" in last["error"]


def _scripted_validation(monkeypatch: pytest.MonkeyPatch, losses: list[float]) -> None:
    """Make `evaluate` report the given validation losses, one per epoch (accuracy 0.5)."""
    real = trial_mod.evaluate
    calls = iter(losses)

    def fake(model, data, precision, device):  # noqa: ANN001
        totals = real(model, data, precision, device)
        n = float(totals[0])
        return torch.tensor([n, n / 2, n * next(calls)], dtype=torch.float64)

    monkeypatch.setattr(trial_mod, "evaluate", fake)


def test_early_stopping_on_validation_loss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scripted_validation(monkeypatch, [2.0, 1.5, 1.75, 1.5, 1.0, 0.5])
    d = write_trial_dir(tmp_path / "t0007", epoch_budget=6, early_stopping_patience=2)
    assert run_trial(d, 1, DistEnv()) == 0
    events = read_events(d / "events.jsonl")
    # Best loss 1.5 at epoch 2; epochs 3 and 4 do not improve on it (1.5 is not < 1.5): stop after 4.
    assert [e["val_loss"] for e in events if e["type"] == "epoch_end"] == [2.0, 1.5, 1.75, 1.5]
    assert events[-1] == {**events[-1], "type": "trial_result", "reason": "early_stop", "epochs": 4,
                          "best_accuracy": 0.5}


def test_diverged_training_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scripted_validation(monkeypatch, [2.0, math.nan, 1.0])
    d = write_trial_dir(tmp_path / "t0013", epoch_budget=3, early_stopping_patience=0)  # 0: no patience limit
    assert run_trial(d, 1, DistEnv()) == 0
    events = read_events(d / "events.jsonl")
    assert [e["val_loss"] for e in events if e["type"] == "epoch_end"] == [2.0, None]  # JSON has no NaN
    assert events[-1]["reason"] == "early_stop" and events[-1]["epochs"] == 2


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_precisions_run_on_cpu(tmp_path: Path, precision: str) -> None:
    d = write_trial_dir(tmp_path / "t0008", epoch_budget=1, precision=precision)
    assert run_trial(d, 1, DistEnv()) == 0
    events = read_events(d / "events.jsonl")
    assert events[-1]["type"] == "trial_result" and events[-1]["epochs"] == 1
    assert events[0]["images_evaluated"] == TINY_DATASET["val_images"]


def test_bf16_autocast_is_applied_on_cpu() -> None:
    from aiperf_runner.train.precision import setup_precision

    p = setup_precision("bf16", "cpu")
    conv = torch.nn.Conv2d(3, 4, 3)
    with p.autocast():
        y = conv(torch.randn(2, 3, 8, 8))
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert conv.weight.grad is not None and conv.weight.grad.dtype == torch.float32
    assert not p.make_scaler().is_enabled()
    assert setup_precision("fp16", "cpu").make_scaler().is_enabled()
    with pytest.raises(ValueError, match="unknown precision"):
        setup_precision("int8", "cpu")
    # fp32 means IEEE fp32: TF32 off for matmuls and cuDNN convolutions (cuDNN allows it by default).
    assert setup_precision("tf32", "cpu").dtype is None
    assert torch.backends.cuda.matmul.fp32_precision == "tf32" and torch.backends.cudnn.conv.fp32_precision == "tf32"
    setup_precision("fp32", "cpu")
    assert torch.backends.cuda.matmul.fp32_precision == "ieee" and torch.backends.cudnn.conv.fp32_precision == "ieee"


def test_unknown_precision_is_a_trial_error(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0009", precision="fp8")
    assert run_trial(d, 1, DistEnv()) == 1
    assert "unknown precision" in read_events(d / "events.jsonl")[-1]["error"]


def test_cosine_schedule() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    s = CosineSchedule(opt, 0.4, 10)
    s.set(0.0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.4 * 0.02)
    s.set(1.0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.4)
    s.set(5.5)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.2)
    s.set(10.0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


# ---- process-group detection ---------------------------------------------------------------------

def test_detect_alone() -> None:
    assert detect_dist_env({}) is None
    # Inside an sbatch script (not an srun step) the SLURM task variables do not make a group.
    assert detect_dist_env({"SLURM_JOB_NODELIST": "n1", "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}) is None
    assert detect_dist_env({"SLURM_JOB_NODELIST": "n1", "SLURM_NTASKS": "1", "SLURM_PROCID": "0",
                            "SLURM_STEP_ID": "0"}) is None


def test_detect_torchrun() -> None:
    d = detect_dist_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                         "MASTER_ADDR": "node7", "MASTER_PORT": "29400"})
    assert d == DistEnv(3, 4, 1, 2, "node7", 29400, "torchrun")
    with pytest.raises(TrialError, match="MASTER_PORT"):
        detect_dist_env({"RANK": "0", "WORLD_SIZE": "2"})


def test_detect_srun(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distenv_mod, "_slurm_node_addr", lambda node: node)
    env = {"SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "gpu[01-02]",
           "SLURM_STEP_NODELIST": "gpu[01-02]", "SLURM_NTASKS": "8", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
           "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_TASKS_PER_NODE": "4(x2)"}
    d = detect_dist_env(env)
    assert d is not None
    assert (d.rank, d.world_size, d.local_rank, d.local_world_size, d.master_addr, d.source) == \
        (5, 8, 1, 4, "gpu01", "slurm")
    assert d.master_port == detect_dist_env(dict(env, SLURM_PROCID="0")).master_port  # same on every task
    # below Linux's ephemeral ports, for any job and step (distenv.py _slurm_port)
    assert all(20000 <= detect_dist_env(dict(env, SLURM_JOB_ID=str(job), SLURM_STEP_ID=str(step))).master_port < 30000
               for job in (1, 1234, 987_654_321) for step in (0, 7, 4294967))
    d = detect_dist_env(dict(env, MASTER_ADDR="10.0.0.1", MASTER_PORT="29500"))
    assert (d.master_addr, d.master_port) == ("10.0.0.1", 29500)


def test_slurm_master_without_scontrol(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no scontrol
    assert distenv_mod._master_node("gpu[07-09,12],cpu3") == "gpu07"
    assert distenv_mod._master_node("node5,node6") == "node5"
    assert distenv_mod._slurm_node_addr("node5") == "node5"


def test_an_unreadable_slurm_node_list_is_a_trial_error() -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "gpu[3-1]", "SLURM_NTASKS": "2",
           "SLURM_PROCID": "0"}
    with pytest.raises(TrialError, match="cannot read the SLURM node list"):
        detect_dist_env(env)
    with pytest.raises(TrialError, match="names no node"):
        detect_dist_env(dict(env, SLURM_JOB_NODELIST=","))


def test_trial_json_fields(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0010", hparams={"batch_size": 7, "lr": 0.3, "weight_decay": 1e-4,
                                                       "label_smoothing": 0.2, "dropout": 0.25})
    cfg = trial_mod.TrialConfig.load(d)
    assert (cfg.batch_size, cfg.lr, cfg.weight_decay, cfg.label_smoothing, cfg.dropout) == (7, 0.3, 1e-4, 0.2, 0.25)
    assert cfg.data.train_images == TINY_DATASET["train_images"] and cfg.data.image_size == 16
    assert cfg.patience == 2 and cfg.epoch_budget == 2
    assert json.loads((d / "trial.json").read_text())["trial"] == cfg.trial


def test_cpu_budget_follows_the_slurm_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    from aiperf_runner.train.trial import cpu_budget

    visible = len(os.sched_getaffinity(0))
    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    assert cpu_budget() == visible
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "1")  # a job given one CPU of a shared node
    assert cpu_budget() == 1
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", str(visible + 64))  # never more than this process may use
    assert cpu_budget() == visible
