"""Hyper-parameter search of AIPerf-LLM: optuna TPE (tpewindow.py) over lr, warmup, weight decay and the
batch in tokens, minimising validation loss: search/hparams.py's TpeHparamSearch (the policy by round,
results paired by trial id, resume) over AIPerf-LLM's space.

A point's keys are `train.llm.trainer.LlmHparams`' fields (`LlmHparams(**point)` builds it); the other
fields of LlmHparams keep their defaults. Sources: `seed` (the default point: the first trial, or one
without a known parent), `inherited` (the parent's point) and `tpe`. Rounds before `tpe_from_round` (3)
inherit; from then on odd rounds ask TPE and even rounds inherit (a trial without a known parent asks
TPE). Every finished result teaches TPE, whatever its point's source. TPE maximises, so it is told
-loss; a non-finite loss (a diverged run) is told as a failed trial. optuna is imported lazily.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiperf_runner.search.hparams import SOURCES, TpeHparamSearch, require_optuna
from aiperf_runner.search.tpewindow import BEST, REBUILD_EVERY, RECENT

KEYS = ("lr", "warmup_steps", "weight_decay", "batch_tokens")
DEFAULT_BATCH_TOKENS = (2048, 4096, 8192)
DEFAULTS: dict[str, Any] = {"lr": 3e-3, "warmup_steps": 30, "weight_decay": 0.1, "batch_tokens": 4096}


@dataclass(frozen=True)
class LlmSpace:
    """The searched bounds; `defaults` is the seed point (within them)."""

    batch_tokens: tuple[int, ...] = DEFAULT_BATCH_TOKENS
    lr: tuple[float, float] = (3e-4, 1e-2)
    warmup_steps: tuple[int, int] = (0, 100)
    weight_decay: tuple[float, float] = (1e-3, 0.3)
    defaults: dict[str, Any] = field(default_factory=lambda: dict(DEFAULTS))

    def __post_init__(self) -> None:
        if not self.batch_tokens or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 or b & (b - 1)
                                        for b in self.batch_tokens):
            raise ValueError(f"batch_tokens must be powers of two, got {self.batch_tokens!r}")
        object.__setattr__(self, "batch_tokens", tuple(sorted(set(self.batch_tokens))))
        problems = self.problems(self.defaults)
        if problems:
            raise ValueError(f"the seed point lies outside the space: {'; '.join(problems)}")

    def distributions(self) -> dict[str, Any]:
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
        return {
            "lr": FloatDistribution(*self.lr, log=True),
            "warmup_steps": IntDistribution(*self.warmup_steps),
            "weight_decay": FloatDistribution(*self.weight_decay, log=True),
            "batch_tokens": CategoricalDistribution(list(self.batch_tokens)),
        }

    def problems(self, hp: Mapping[str, Any]) -> list[str]:
        """What of `hp` lies outside the space (empty: all of it is inside)."""
        out = [f"missing {k}" for k in KEYS if k not in hp]
        if out:
            return out
        for k in ("lr", "warmup_steps", "weight_decay"):
            lo, hi = getattr(self, k)
            if not lo <= hp[k] <= hi:
                out.append(f"{k} {hp[k]!r} outside {lo}..{hi}")
        if hp["batch_tokens"] not in self.batch_tokens:
            out.append(f"batch_tokens {hp['batch_tokens']!r} not one of {self.batch_tokens}")
        return out

    def contains(self, hp: Mapping[str, Any]) -> bool:
        return not self.problems(hp)


def _nearest(value: int, choices: Sequence[int]) -> int:
    """The choice closest to `value` on a log scale (the smaller between equals)."""
    return min(choices, key=lambda c: (abs(math.log2(c) - math.log2(value)), c))


class LlmHparamSearch(TpeHparamSearch[LlmSpace]):
    """TPE over LlmSpace with the seed / inherited / tpe policy by round; see the module docstring.

    `batch_tokens`: the batch sizes (tokens) TPE may choose; the seed point takes the one nearest to
    4,096 when 4,096 is not among them. `space` overrides all bounds at once."""

    RESULT = "loss"
    MAXIMISE = False
    NONFINITE_FAILS = True  # a diverged run
    TOLD_ONCE = True
    REQUIRED = KEYS

    def __init__(self, seed: int = 0, n_startup_trials: int = 4, tpe_from_round: int = 3,
                 batch_tokens: Sequence[int] = DEFAULT_BATCH_TOKENS, space: LlmSpace | None = None, *,
                 rng_seed: int | None = None, history_recent: int = RECENT, history_best: int = BEST,
                 history_rebuild_every: int = REBUILD_EVERY) -> None:
        if rng_seed is not None:
            seed = rng_seed
        require_optuna()
        if space is None:
            choices = tuple(batch_tokens)
            seed_point = dict(DEFAULTS)
            if choices and all(isinstance(b, int) and b > 0 for b in choices):
                seed_point["batch_tokens"] = _nearest(DEFAULTS["batch_tokens"], choices)
            space = LlmSpace(batch_tokens=choices, defaults=seed_point)
        super().__init__(space, seed, n_startup_trials, tpe_from_round, history_recent=history_recent,
                         history_best=history_best, history_rebuild_every=history_rebuild_every)

    def defaults(self) -> dict[str, Any]:
        """The seed point."""
        return _clean(self.space.defaults)

    def _seed_point(self) -> Mapping[str, Any]:
        return self.space.defaults

    @staticmethod
    def _clean(hp: Mapping[str, Any]) -> dict[str, Any]:
        return _clean(hp)

    def tell(self, trial_id: str, loss: float | None) -> bool:
        """The validation loss of trial `trial_id` (None: it failed or was cancelled; non-finite: it
        diverged, told to TPE as failed). False if the trial is unknown or already told."""
        return self._tell(trial_id, loss)


def _clean(hp: Mapping[str, Any]) -> dict[str, Any]:
    """A point with plain Python types (optuna and JSON hand back numpy or float values)."""
    out = dict(hp)
    for k in ("lr", "weight_decay"):
        if k in out:
            out[k] = float(out[k])
    for k in ("warmup_steps", "batch_tokens"):
        if k in out:
            out[k] = int(out[k])
    return out


__all__ = ["DEFAULTS", "DEFAULT_BATCH_TOKENS", "KEYS", "SOURCES", "LlmHparamSearch", "LlmSpace"]
