"""The learning rate of a data-parallel trial: scaled linearly with the global batch, warmed up.

Goyal et al., "Accurate, Large Minibatch SGD" (2017), and torchvision's classification
references: when the global batch grows k-fold, multiply the learning rate by k and reach it
through a linear warm-up, so that the first steps (where the weights change fastest) do not
diverge. Here

    peak_lr = lr x global_batch / reference_batch,    global_batch = batch_size x ranks

`lr` and `batch_size` (per device) are the trial's hyper-parameters, as the search proposed them
and as its `trial_proposed` logged them: the scaling is the trial program's, never written back
into hparams.json. `reference_batch` 0 (the default) means the per-device batch itself, so that
`lr` is the rate of one device and k is the number of ranks: one rank trains exactly as before.

The warm-up rises linearly per iteration from 2 % of peak_lr to peak_lr (torchvision's linear
warm-up from a small fraction), then a cosine decays it to zero at the end of the trial's epoch
budget. Its length: `warmup_epochs` when the run sets it, else 1 epoch at k <= 1 and Goyal's 5
epochs at k > 1; either way at most a tenth of the epoch budget (a trial of 15 epochs spends
most of them past the warm-up) unless set explicitly.

The first `epoch_end` of every attempt carries `lr_scaling` (docs/log-format.md), so that a
reader of the log sees the rate the trial actually trained at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

RULES = ("linear", "none")
WARMUP_START = 0.02  # fraction of the peak rate at the first step
WARMUP_EPOCHS_SINGLE = 1.0  # default warm-up at k <= 1 (the schedule before scaling existed)
WARMUP_EPOCHS_SCALED = 5.0  # Goyal et al.'s, at k > 1
WARMUP_SHARE = 0.1  # default cap: this share of the epoch budget


@dataclass(frozen=True)
class LrScaling:
    """How a trial's learning rate follows its global batch (see the module docstring)."""

    base_lr: float  # the trial's `lr` hyper-parameter
    batch_size: int  # per device
    world_size: int  # ranks of this attempt
    epoch_budget: int
    rule: str = "linear"
    reference_batch: int = 0  # 0: the per-device batch (k = ranks)
    warmup_epochs_set: float | None = None  # the run's --lr-warmup-epochs; None: the default above

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"lr scaling rule must be one of {', '.join(RULES)}, not {self.rule!r}")
        if self.reference_batch < 0:
            raise ValueError(f"lr reference batch must be 0 (the per-device batch) or more, "
                             f"not {self.reference_batch}")
        warmup = self.warmup_epochs_set
        if warmup is not None and not (warmup >= 0 and math.isfinite(warmup)):
            raise ValueError(f"lr warm-up must be a number of epochs >= 0, not {self.warmup_epochs_set}")

    @classmethod
    def from_settings(cls, settings: Any, *, base_lr: float, batch_size: int, world_size: int,
                      epoch_budget: int) -> LrScaling:
        """From trial.json's `lr_scaling` object ({rule, reference_batch, warmup_epochs}). None (a
        trial.json without it, from a runner before scaling): rule "none", the rate as it was."""
        s = settings if isinstance(settings, dict) else {"rule": "none"}
        warmup = s.get("warmup_epochs")
        return cls(base_lr, batch_size, world_size, epoch_budget, rule=str(s.get("rule", "linear")),
                   reference_batch=int(s.get("reference_batch") or 0),
                   warmup_epochs_set=None if warmup is None else float(warmup))

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    @property
    def reference(self) -> int:
        """The batch `base_lr` is the rate of."""
        return self.reference_batch or self.batch_size

    @property
    def factor(self) -> float:
        """k: peak_lr / base_lr."""
        return self.global_batch / self.reference if self.rule == "linear" else 1.0

    @property
    def peak_lr(self) -> float:
        return self.base_lr * self.factor  # exactly base_lr at k = 1

    @property
    def warmup_epochs(self) -> float:
        budget = max(1, self.epoch_budget)
        if self.warmup_epochs_set is not None:
            return min(self.warmup_epochs_set, float(budget))
        default = WARMUP_EPOCHS_SCALED if self.factor > 1.0 else WARMUP_EPOCHS_SINGLE
        return min(default, WARMUP_SHARE * budget)

    def record(self) -> dict[str, Any]:
        """The `lr_scaling` object of the attempt's first `epoch_end`."""
        return {"rule": self.rule, "base_lr": self.base_lr, "reference_batch": self.reference,
                "global_batch": self.global_batch, "peak_lr": self.peak_lr, "warmup_epochs": self.warmup_epochs}


class CosineSchedule:
    """Per-iteration learning rate over the trial's epoch budget: linear warm-up, cosine to zero.

    A pure function of progress in epochs (`epoch - 1 + step / steps_per_epoch`), so a resumed
    attempt continues exactly where the checkpoint left off, even on a different number of devices
    (at that attempt's peak rate). `peak_lr` is the scaled rate (`LrScaling.peak_lr`); `warmup`
    None keeps the unscaled default, min(1 epoch, a tenth of the budget).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, peak_lr: float, epoch_budget: int,
                 warmup: float | None = None) -> None:
        self.optimizer = optimizer
        self.base_lr = peak_lr
        self.budget = max(1, epoch_budget)
        self.warmup = min(WARMUP_EPOCHS_SINGLE, WARMUP_SHARE * self.budget) if warmup is None else warmup  # epochs

    @classmethod
    def scaled(cls, optimizer: torch.optim.Optimizer, scaling: LrScaling) -> CosineSchedule:
        return cls(optimizer, scaling.peak_lr, scaling.epoch_budget, scaling.warmup_epochs)

    def factor(self, progress: float) -> float:
        if progress < self.warmup:
            return max(progress / self.warmup, WARMUP_START)
        p = min(1.0, (progress - self.warmup) / max(self.budget - self.warmup, 1e-9))
        return 0.5 * (1.0 + math.cos(math.pi * p))

    def set(self, progress: float) -> None:
        lr = self.base_lr * self.factor(progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
