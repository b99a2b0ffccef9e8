"""The questions the runner asks of a run's state: the log's replay (spec/replay.py) plus queries.

The controller feeds every event it writes through `RunState.apply`, and `--resume`, `status`,
`report` and the benchmarks rebuild the same state with `RunState.load`: one fold, so what a
resumed controller believes is exactly what the log says and what the service will read.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from aiperf_runner.spec.eventlog import iter_events
from aiperf_runner.spec.replay import INTERRUPTED, TERMINAL, Attempt, Replay, TrialState
from aiperf_runner.spec.runio import RunDir
from aiperf_runner.spec.scoring import DEFAULT_RULES, ScoreAccumulator, check_rules, run_flops_fn

__all__ = ["INTERRUPTED", "TERMINAL", "Attempt", "RunState", "TrialState", "read_run_json"]


WAITING = ("proposed", "retry")
_TRIAL_EVENTS = frozenset({"trial_proposed", "trial_started", "trial_finished", "trial_failed", "trial_cancelled"})


class RunState(Replay):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._waiting: dict[str, TrialState] = {}  # kept as events are applied: waiting() costs no scan

    def apply(self, ev: Mapping[str, Any], line: int = 0) -> None:
        super().apply(ev, line)
        if ev.get("type") in _TRIAL_EVENTS:
            tr = self.trials.get(str(ev.get("trial")))
            if tr is not None and tr.status in WAITING:
                self._waiting[tr.trial] = tr
            elif tr is not None:
                self._waiting.pop(tr.trial, None)

    @classmethod
    def load(cls, path: str | Path, *, allow_partial_tail: bool = True, **kwargs: Any) -> RunState:
        """Replay a run directory's log (or a log file); keeps each trial's epoch records by default."""
        path = Path(path)
        log = path / "events.jsonl" if path.is_dir() else path
        kwargs.setdefault("keep_epochs", True)
        state = super().load(log, allow_partial_tail=allow_partial_tail, **kwargs)
        assert isinstance(state, RunState)
        return state

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def running(self) -> list[Attempt]:
        """Attempts without an end line (also those a killed controller left behind)."""
        return [a for tr in self.trials.values() for a in tr.attempts if a.outcome is None]

    def waiting(self) -> list[TrialState]:
        """Trials proposed but not started, or failed and due for a retry (in proposal order)."""
        if not self._waiting:
            return []
        return sorted(self._waiting.values(), key=lambda tr: tr.seq)

    def count(self, status: str) -> int:
        return self.status_counts[status]

    def best_accuracy(self) -> float | None:
        return self.best_epoch_accuracy

    def epoch_records(self) -> Iterator[dict[str, Any]]:
        """Every trial's kept epoch records (needs `keep_epochs`), trial by trial."""
        for tr in self.all_trials():
            yield from tr.epochs.values()

    def morphism_counts(self) -> dict[str, int]:
        counts = Counter({"deeper": 0, "wider": 0, "skip": 0})
        for tr in self.trials.values():
            counts.update(tr.morphisms)
        return dict(counts)

    def hparam_source_counts(self) -> dict[str, int]:
        counts = Counter({"seed": 0, "inherited": 0, "tpe": 0})
        counts.update(tr.hparam_source for tr in self.trials.values())
        return dict(counts)

    def parent_trial(self, arch_hash: str | None) -> str | None:
        """The trial that trained an architecture (the latest, if it was trained more than once)."""
        ids = self.by_arch.get(arch_hash or "")
        return ids[-1] if ids else None

    def slot_utilisation(self, end: float | None = None) -> float | None:
        """Share of slot time spent inside trials, from run start to `end` (default: run end or last event).

        A slot is busy from `trial_started` to the attempt's `trial_finished` / `trial_failed` /
        `trial_cancelled` (an attempt still open counts up to `end`).
        """
        if self.started_at is None or not self.slots:
            return None
        end = end if end is not None else (self.finished_at or self.last_t or self.started_at)
        span = end - self.started_at
        if span <= 0:
            return None
        busy = 0.0
        for tr in self.trials.values():
            for att in tr.attempts:
                stop = min(att.ended if att.ended is not None else end, end)
                busy += max(0.0, stop - max(att.started, self.started_at))
        return busy / (self.slots * span)


def load_scored(run_dir: str | Path, *, keep_epochs: bool = False) -> tuple[RunState, ScoreAccumulator | None]:
    """The run's state and its score, from one pass over the log (the score is None when the
    run's rules or files cannot be read)."""
    run_dir = Path(run_dir)
    state = RunState(keep_epochs=keep_epochs)
    scored: ScoreAccumulator | None = None
    try:
        rules = check_rules(str(read_run_json(run_dir).get("rules") or DEFAULT_RULES))
        scored = ScoreAccumulator(rules, run_flops_fn(RunDir(run_dir), rules), replay=state)
    except (OSError, ValueError):
        pass
    for event in iter_events(run_dir / "events.jsonl", allow_partial_tail=True):
        state.apply(event.data, event.line)
    return state, scored


def read_run_json(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        # The errno text names a file; an operator who typed the wrong directory wants to hear that.
        raise FileNotFoundError("not a run directory (no run.json)" if Path(run_dir).is_dir() else "does not exist")
    data: dict[str, Any] = json.loads(path.read_text())
    return data
