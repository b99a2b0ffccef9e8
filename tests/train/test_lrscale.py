"""The learning rate scaled with the global batch (train/lrscale.py): the rule, the warm-up, the log.

One rank at the reference batch must train exactly as before scaling existed: the schedule is
compared step by step with the unscaled one, and two whole trials (scaling on and off) must end
with the same weights, bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from aiperf_runner.spec import schema
from aiperf_runner.spec.eventlog import read_events
from aiperf_runner.train.lrscale import CosineSchedule, LrScaling
from aiperf_runner.train.trial import DistEnv, run_trial

from tests.train.conftest import write_trial_dir


def _lrs(schedule: CosineSchedule, steps: int, epochs: int) -> list[float]:
    out = []
    for i in range(steps * epochs + 1):
        schedule.set(i / steps)
        out.append(schedule.optimizer.param_groups[0]["lr"])
    return out


def _opt() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)


@pytest.mark.parametrize("budget", [1, 2, 15, 60])
def test_one_rank_is_the_unscaled_schedule_exactly(budget: int) -> None:
    scaling = LrScaling(0.05, 32, 1, budget)
    assert scaling.factor == 1.0 and scaling.peak_lr == 0.05 and scaling.global_batch == 32
    assert scaling.warmup_epochs == min(1.0, 0.1 * budget)
    before, after = _opt(), _opt()
    assert _lrs(CosineSchedule(before, 0.05, budget), 7, budget) == \
        _lrs(CosineSchedule.scaled(after, scaling), 7, budget)


def test_linear_rule_multiplies_by_global_over_reference_batch() -> None:
    eight = LrScaling(0.1, 128, 8, 60)  # reference 0: the per-device batch, k = ranks
    assert (eight.global_batch, eight.reference, eight.factor) == (1024, 128, 8.0)
    assert eight.peak_lr == pytest.approx(0.8)
    assert eight.warmup_epochs == 5.0  # Goyal et al.'s warm-up once scaled up
    assert LrScaling(0.1, 128, 8, 15).warmup_epochs == 1.5  # at most a tenth of the budget
    goyal = LrScaling(0.1, 32, 256, 90, reference_batch=256)  # 8k images per step: 3.2
    assert goyal.peak_lr == pytest.approx(3.2) and goyal.record()["reference_batch"] == 256
    smaller = LrScaling(0.1, 64, 1, 10, reference_batch=256)  # below the reference: scaled down, 1-epoch warm-up
    assert smaller.peak_lr == pytest.approx(0.025) and smaller.warmup_epochs == 1.0
    assert LrScaling(0.1, 128, 8, 60, rule="none").peak_lr == 0.1
    assert LrScaling(0.1, 128, 8, 60, warmup_epochs_set=0.0).warmup_epochs == 0.0
    assert LrScaling(0.1, 128, 8, 3, warmup_epochs_set=9.0).warmup_epochs == 3.0  # never past the budget


def test_scaled_schedule_warms_up_to_the_peak_then_decays() -> None:
    opt = _opt()
    s = CosineSchedule.scaled(opt, LrScaling(0.1, 32, 4, 60))
    lrs = {}
    for p in (0.0, 2.5, 5.0, 32.5, 60.0):
        s.set(p)
        lrs[p] = opt.param_groups[0]["lr"]
    assert lrs[0.0] == pytest.approx(0.4 * 0.02)
    assert lrs[2.5] == pytest.approx(0.2)  # halfway through the warm-up
    assert lrs[5.0] == pytest.approx(0.4)
    assert lrs[32.5] == pytest.approx(0.2)  # halfway through the cosine
    assert lrs[60.0] == pytest.approx(0.0, abs=1e-12)


def test_settings_from_trial_json() -> None:
    kw = {"base_lr": 0.1, "batch_size": 32, "world_size": 2, "epoch_budget": 10}
    assert LrScaling.from_settings(None, **kw).rule == "none"  # an older runner's trial.json
    assert LrScaling.from_settings({}, **kw).peak_lr == pytest.approx(0.2)
    s = LrScaling.from_settings({"rule": "linear", "reference_batch": 16, "warmup_epochs": 2}, **kw)
    assert (s.peak_lr, s.warmup_epochs) == (pytest.approx(0.4), 2.0)
    for bad in ({"rule": "sqrt"}, {"reference_batch": -1}, {"warmup_epochs": -1}):
        with pytest.raises(ValueError):
            LrScaling.from_settings(bad, **kw)


def test_trial_logs_its_scaling_once_per_attempt_and_one_rank_matches_unscaled(tmp_path: Path) -> None:
    scaled = write_trial_dir(tmp_path / "t0001", lr_scaling={"rule": "linear", "reference_batch": 0,
                                                              "warmup_epochs": None})
    plain = write_trial_dir(tmp_path / "t0002")  # no lr_scaling: trains as before scaling existed
    for d in (scaled, plain):
        assert run_trial(d, 1, DistEnv()) == 0
    events = read_events(scaled / "events.jsonl")
    ends = [e for e in events if e["type"] == "epoch_end"]
    assert ends[0]["lr_scaling"] == {"rule": "linear", "base_lr": 0.05, "reference_batch": 32, "global_batch": 32,
                                     "peak_lr": 0.05, "warmup_epochs": 0.2}
    assert schema.problem(ends[0], schema.TRIAL) is None
    assert all("lr_scaling" not in e for e in ends[1:])
    assert read_events(plain / "events.jsonl")[0]["lr_scaling"]["rule"] == "none"
    # The same training: one rank at the reference batch is the unscaled trial, bit for bit.
    results = [read_events(d / "events.jsonl")[-1] for d in (scaled, plain)]
    assert results[0]["weights_sha256"] == results[1]["weights_sha256"]
    assert json.loads((scaled / "hparams.json").read_text())["lr"] == 0.05  # never rewritten


def test_schema_rejects_a_malformed_lr_scaling() -> None:
    good = {"type": "epoch_end", "trial": "t0000", "attempt": 1, "epoch": 1, "images_trained": 1,
            "images_evaluated": 1, "val_accuracy": 0.5, "val_loss": 1.0, "started_at": 1.0, "ended_at": 2.0,
            "seconds": 1.0, "lr_scaling": {"rule": "linear", "base_lr": 0.1, "reference_batch": 32,
                                           "global_batch": 64, "peak_lr": 0.2, "warmup_epochs": 1.0}}
    assert schema.valid(good) and schema.problem(good) is None
    bad = {**good, "lr_scaling": {**good["lr_scaling"], "global_batch": 0}}
    assert not schema.valid(bad) and "lr_scaling" in (schema.problem(bad) or "")
