"""Work, score and regulated score of a run (docs/design.md section 4; docs/score.md).

- work(t)  = sum over counted `epoch_end` events with ended_at <= t of
             train_FLOP/image x images_trained + eval_FLOP/image x images_evaluated
             (v2: the counts the epoch logged; v1-compat: 1,280,000 and 50,000 per epoch)
- score(t) = work(t) / (t - t0)        t0 = run start (v2) or first trial start (v1-compat)
- regulated(t) = score(t) x |ln(1 - max_acc(t))|, max_acc = best validation accuracy of the
  counted epochs that ended by t (capped at `ACCURACY_CAP` so that an accuracy of 1 stays finite)
- series: both on a regular grid of t - t0 (`grid_step`), plus the run's end; the final score is
  the point at the run's end.

Which epochs count is the log's replay's decision (spec/replay.py). Each counted epoch's
contribution is computed once as it streams past (`EpochTable`: three compact float
columns); the series is then one sort + cumulative sum + binary searches: O(N log N) for N epochs.
FLOPs per image come from `spec.flops` on the trial's graph file, never from the log.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .flops import DEFAULT_RULES, RULES
from .replay import Attempt, Replay, TrialState

V1_TRAIN_IMAGES = 1_280_000
"""v1-compat: images charged per epoch for training, whatever the epoch logged (AIPerf's constant)."""
V1_EVAL_IMAGES = 50_000
"""v1-compat: images charged per epoch for evaluation."""

ACCURACY_CAP = 1.0 - 1e-6
"""max_acc is capped here before |ln(1 - max_acc)|: an accuracy of 1 gives factor ln(1e6) ~ 13.8."""

OFFICIAL_STEP_S = 360.0
"""Grid step of runs of one hour or more: 0.1 h."""
LONG_RUN_S = 3600.0
MAX_POINTS = 200
"""Shorter runs use the smallest of `SHORT_STEPS_S` that gives at most this many grid points."""
SHORT_STEPS_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 180.0, 360.0)


def check_rules(rules: str) -> str:
    if rules not in RULES:
        raise ValueError(f"unknown rules {rules!r} (expected one of {', '.join(RULES)})")
    return rules


def epoch_work(train_flops: float, eval_flops: float, images_trained: int, images_evaluated: int,
               rules: str = DEFAULT_RULES) -> float:
    """FLOPs one epoch contributes to the work."""
    if rules == "v1-compat":
        images_trained, images_evaluated = V1_TRAIN_IMAGES, V1_EVAL_IMAGES
    return float(train_flops * images_trained + eval_flops * images_evaluated)


def accuracy_factor(max_accuracy: float) -> float:
    """|ln(1 - max_acc)| with max_acc clipped to [0, ACCURACY_CAP]."""
    a = min(max(float(max_accuracy), 0.0), ACCURACY_CAP)
    return abs(math.log1p(-a))


def regulated_score(score: float, max_accuracy: float) -> float:
    return score * accuracy_factor(max_accuracy)


def grid_step(duration_s: float) -> float:
    """Seconds between series points: 360 (0.1 h) for runs >= 1 h, else the smallest of
    `SHORT_STEPS_S` giving at most `MAX_POINTS` points."""
    if duration_s >= LONG_RUN_S:
        return OFFICIAL_STEP_S
    for step in SHORT_STEPS_S:
        if duration_s / step <= MAX_POINTS:
            return step
    return OFFICIAL_STEP_S


def grid(duration_s: float, step: float | None = None) -> list[float]:
    """Series times (seconds since t0): step, 2 step, ... below the duration, then the duration."""
    if duration_s <= 0:
        return []
    step = step or grid_step(duration_s)
    n = int(math.floor(duration_s / step + 1e-9))
    ts = [round(k * step, 6) for k in range(1, n + 1)]
    ts = [t for t in ts if t < duration_s]
    ts.append(float(duration_s))
    return ts


class EpochTable:
    """Compact per-epoch columns (8 bytes each): end time, work contributed, validation accuracy."""

    __slots__ = ("ended_at", "work", "accuracy")

    def __init__(self) -> None:
        self.ended_at = array("d")
        self.work = array("d")
        self.accuracy = array("d")

    def append(self, ended_at: float, work: float, accuracy: float) -> None:
        self.ended_at.append(ended_at)
        self.work.append(work)
        self.accuracy.append(accuracy)

    def __len__(self) -> int:
        return len(self.ended_at)


@dataclass
class Series:
    """The score series of a run and its final values (the last point, at the run's end)."""

    rules: str
    t0: float | None
    end: float | None
    step: float
    points: list[dict[str, float]] = field(default_factory=list)
    work: float = 0.0
    score: float = 0.0
    regulated: float = 0.0
    max_accuracy: float = 0.0
    epochs: int = 0

    @property
    def duration_s(self) -> float:
        if self.t0 is None or self.end is None:
            return 0.0
        return max(self.end - self.t0, 0.0)


def compute_series(table: EpochTable, t0: float | None, end: float | None, rules: str = DEFAULT_RULES,
                   step: float | None = None) -> Series:
    """Sample work, score, regulated score and max accuracy on the grid over [t0, end]."""
    if t0 is None or end is None or end <= t0:
        return Series(rules, t0, end, step or 0.0, epochs=len(table))
    duration = end - t0
    step = step or grid_step(duration)
    ts = np.asarray(grid(duration, step), dtype=np.float64)
    ended = np.frombuffer(table.ended_at, dtype=np.float64) if len(table) else np.empty(0)
    work = np.frombuffer(table.work, dtype=np.float64) if len(table) else np.empty(0)
    acc = np.frombuffer(table.accuracy, dtype=np.float64) if len(table) else np.empty(0)
    # Sorted by end time (stable: equal ends keep their order), cumulated in place; one column at a
    # time, so that 16 transient bytes per epoch are held at once (the order and one column).
    order = np.argsort(ended, kind="stable")
    # k = number of epochs ended by t0 + t (ended_at <= t0 + t); the value after k epochs is cum[k - 1]
    k = np.searchsorted(ended[order], t0 + ts, side="right")
    some = k > 0
    at = np.maximum(k - 1, 0)
    cum = work[order]
    np.cumsum(cum, out=cum)
    w = np.where(some, cum[at] if len(cum) else 0.0, 0.0)
    del cum
    cum = acc[order]
    del order
    np.maximum.accumulate(cum, out=cum)
    a = np.where(some, cum[at] if len(cum) else 0.0, 0.0)
    del cum
    points = []
    for t, wk, ak in zip(ts.tolist(), w.tolist(), a.tolist(), strict=True):
        s = wk / t
        points.append({"t": t, "work": wk, "score": s, "regulated": regulated_score(s, ak),
                       "max_accuracy": ak})
    last = points[-1]
    return Series(rules, t0, end, step, points, work=last["work"], score=last["score"],
                  regulated=last["regulated"], max_accuracy=last["max_accuracy"], epochs=len(table))


def series_window(points: list[dict[str, float]], fraction: float = 0.5) -> list[dict[str, float]]:
    """The points in the last `fraction` of the run (t >= (1 - fraction) x duration)."""
    if not points:
        return []
    duration = points[-1]["t"]
    start = (1.0 - fraction) * duration
    return [p for p in points if p["t"] >= start]


def coefficient_of_variation(values: Iterable[float]) -> float | None:
    """Population standard deviation / mean; None for fewer than 2 values or a mean <= 0."""
    v = np.asarray(list(values), dtype=np.float64)
    if v.size < 2:
        return None
    mean = float(v.mean())
    if mean <= 0:
        return None
    return float(v.std() / mean)


# ---- streaming accumulation ------------------------------------------------------------------------
FlopsFn = Callable[[str], "tuple[float, float] | None"]
"""trial id -> (train FLOP/image, eval FLOP/image), or None if the trial's FLOPs cannot be known."""


class ScoreAccumulator:
    """Listens to a run's `Replay` (spec/replay.py) and puts each counted epoch's work in an EpochTable.

    The replay decides which epochs count: an `epoch_end` whose epoch number is not above the last
    one of its trial (a retried attempt that re-ran an epoch) does not count again. Epochs of a
    trial whose FLOPs are unknown (`flops_for` returns None) are not counted either.
    `feed(event)` applies an event to the replay this accumulator listens to (its own by default).
    """

    def __init__(self, rules: str, flops_for: FlopsFn, replay: Replay | None = None) -> None:
        self.rules = check_rules(rules)
        self.flops_for = flops_for
        self.table = EpochTable()
        self.work = 0.0  # the work of the counted epochs so far (FLOPs)
        self.uncounted_epochs = 0
        self._flops: dict[str, tuple[float, float] | None] = {}
        self._v1 = rules == "v1-compat"
        self.replay = replay if replay is not None else Replay()
        self.replay.listen(self)

    def feed(self, ev: Mapping[str, Any]) -> None:
        self.replay.apply(ev)

    def on_epoch(self, ev: Mapping[str, Any], trial: TrialState, attempt: Attempt | None, counted: bool,
                 line: int) -> None:
        if not counted:
            return
        tid = trial.trial
        flops = self._flops
        if tid in flops:
            f = flops[tid]
        else:
            f = flops[tid] = self.flops_for(tid)
        if f is None:
            self.uncounted_epochs += 1
            return
        if self._v1:
            work = f[0] * V1_TRAIN_IMAGES + f[1] * V1_EVAL_IMAGES
        else:
            work = f[0] * ev["images_trained"] + f[1] * ev["images_evaluated"]
        work = float(work)
        table = self.table
        table.ended_at.append(ev["ended_at"])  # array("d") takes ints and floats as float() does
        table.work.append(work)
        table.accuracy.append(ev["val_accuracy"])
        self.work += work

    @property
    def trials_with_epochs(self) -> int:
        """Trials with at least one epoch logged."""
        return sum(1 for tr in self.replay.all_trials() if tr.last_epoch)

    @property
    def trials_finished(self) -> int:
        return self.replay.trials_finished

    @property
    def repeated_epochs(self) -> int:
        return self.replay.repeated_epochs

    def trial_flops(self, trial: str) -> tuple[float, float] | None:
        """The (train, eval) FLOPs per image used for `trial` (None if unknown or not yet seen)."""
        return self._flops.get(trial)

    @property
    def finished_t(self) -> float | None:
        return self.replay.finished_at

    @property
    def t0(self) -> float | None:
        return self.replay.first_trial_start if self._v1 else self.replay.started_at

    @property
    def end(self) -> float | None:
        """The run's end: `run_finished`, else the last event (a run still going or cut short)."""
        return self.replay.finished_at if self.replay.finished_at is not None else self.replay.last_t

    def series(self, step: float | None = None) -> Series:
        return compute_series(self.table, self.t0, self.end, self.rules, step)


def run_flops_fn(run: Any, rules: str) -> FlopsFn:
    """A `FlopsFn` over a `runio.RunDir` (None for trials whose graph cannot be read)."""
    from .runio import RunIOError

    def flops_for(trial: str) -> tuple[float, float] | None:
        try:
            counts = run.trial_flops(trial, rules)
        except RunIOError:
            return None
        return float(counts.train), float(counts.eval)

    return flops_for


def score_run(path: str | Path, rules: str | None = None, flops_for: FlopsFn | None = None) -> Series:
    """The score series of a run directory (no checks: `spec.verify.verify` does those)."""
    from .runio import RunDir

    run = RunDir(path)
    rules = check_rules(rules or str(run.run.get("rules") or DEFAULT_RULES))
    acc = ScoreAccumulator(rules, flops_for or run_flops_fn(run, rules))
    for event in run.events():
        acc.replay.apply(event.data, event.line)
    return acc.series()
