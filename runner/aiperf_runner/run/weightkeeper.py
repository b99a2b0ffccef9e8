"""The controller's side of the weights rule (spec/retention.py): keep or delete each finished trial's
weights, and log which.

In a witnessed run a finished trial waits for the next receipt: its beacon decides (`selected`);
a trial it does not select keeps its weights only while it is the run's best trial, and they are
deleted (`weights_dropped`, reason `superseded`) when a better trial is decided. An unwitnessed run
keeps the best trial's weights only. Disk stays bounded: a few per cent of the trials' weights.

The run's best trial and the trials kept only for being the best are followed as trials finish
and decisions are logged (one scan of the trials when the keeper is made, on `--resume`), so a
finished trial costs the same at 40,000 trials as at 40.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiperf_runner.run.state import RunState, TrialState
from aiperf_runner.spec import rules
from aiperf_runner.spec.retention import WEIGHTS, selected, share

Log = Callable[..., dict[str, Any]]


def keep_share(preset: str) -> float:
    """The share of trials a beacon keeps, for this preset (the rules table's)."""
    return share(rules.thresholds(), preset)


def best_of(state: RunState) -> TrialState | None:
    """The run's best finished trial with weights (the highest best accuracy; the first on a tie)."""
    finished = [tr for tr in state.trials.values() if tr.weights_sha256 and tr.best_accuracy is not None]
    return max(finished, key=lambda tr: tr.best_accuracy or 0.0) if finished else None


class WeightKeeper:
    def __init__(self, run_dir: Path, state: RunState, log: Log, keep_share: float, witnessed: bool,
                 beacons: dict[str, str] | None = None) -> None:
        self.run_dir = run_dir
        self.state = state
        self.log = log
        self.keep_share = keep_share
        self.witnessed = witnessed
        self.best = best_of(state)  # kept up to date by `finished`
        self._kept_for_best = {tr.trial: tr for tr in state.trials.values() if _kept_for_best(tr)}
        # On --resume: trials finished but undecided; those a receipt already followed are decided now.
        self.pending = [tr for tr in state.trials.values() if tr.weights_sha256 and tr.weights is None]
        for tr in list(self.pending):
            if beacons and tr.trial in beacons:
                self._decide(tr, beacons[tr.trial])
                self.pending.remove(tr)
        if not witnessed:
            for tr in self.pending:
                self._decide_unwitnessed(tr)
            self.pending = []

    def finished(self, tr: TrialState) -> None:
        """A trial just logged trial_finished."""
        if not tr.weights_sha256:
            return
        if tr.best_accuracy is not None and (self.best is None or _better(tr, self.best)):
            self.best = tr
        if self.witnessed:
            self.pending.append(tr)
        else:
            self._decide_unwitnessed(tr)

    def receipt(self, beacon: str) -> None:
        """A witness receipt was just logged: its beacon decides every trial waiting for one."""
        pending, self.pending = self.pending, []
        for tr in pending:
            self._decide(tr, beacon)

    # ---- deciding ----------------------------------------------------------------------------------------
    def _decide(self, tr: TrialState, beacon: str) -> None:
        if selected(beacon, tr.trial, self.keep_share):
            self.log("weights_kept", trial=tr.trial, sha256=tr.weights_sha256, reason="beacon")
        elif self.best is tr:
            self._keep_for_best(tr, "best")
        else:
            self._drop(tr, "beacon")
        self._drop_superseded()

    def _decide_unwitnessed(self, tr: TrialState) -> None:
        if self.best is tr:
            self._keep_for_best(tr, "unwitnessed")
        else:
            self._drop(tr, "unwitnessed")
        self._drop_superseded()

    def _keep_for_best(self, tr: TrialState, reason: str) -> None:
        self.log("weights_kept", trial=tr.trial, sha256=tr.weights_sha256, reason=reason)
        self._kept_for_best[tr.trial] = tr

    def _drop_superseded(self) -> None:
        """Weights kept only for being the best, now that another trial is the best."""
        for tr in sorted(self._kept_for_best.values(), key=lambda t: t.seq):
            if tr is not self.best and _kept_for_best(tr):
                self._drop(tr, "superseded")

    def _drop(self, tr: TrialState, reason: str) -> None:
        (self.run_dir / "trials" / tr.trial / WEIGHTS).unlink(missing_ok=True)
        self.log("weights_dropped", trial=tr.trial, reason=reason)
        self._kept_for_best.pop(tr.trial, None)


def _kept_for_best(tr: TrialState) -> bool:
    return tr.weights == "kept" and tr.weights_reason in ("best", "unwitnessed")


def _better(tr: TrialState, than: TrialState) -> bool:
    """`tr` is the better trial as `best_of` orders them (higher accuracy; on a tie the earlier proposed)."""
    a, b = tr.best_accuracy or 0.0, than.best_accuracy or 0.0
    return a > b or (a == b and tr.seq < than.seq)
