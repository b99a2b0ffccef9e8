"""The state of a run as its event log tells it.

The controller feeds every event it writes through `RunState.apply`, and `--resume`, `status`,
`report` and the benchmarks rebuild the same state by replaying the log: one code path, so what a
resumed controller believes is exactly what the log says.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiperf_runner.spec.eventlog import iter_events

INTERRUPTED = "controller interrupted"
TERMINAL = ("trial_finished", "trial_failed", "trial_cancelled")


@dataclass
class Attempt:
    trial: str
    attempt: int
    slot: int
    started: float
    nodes: list[str] = field(default_factory=list)
    devices: int = 1
    ended: float | None = None
    outcome: str | None = None  # "finished" / "failed" / "cancelled"; None while running
    error: str | None = None


@dataclass
class TrialState:
    trial: str
    seq: int
    arch_hash: str
    parent: str | None
    morphisms: list[str]
    hparams: dict[str, Any]
    hparam_source: str
    round: int
    epoch_budget: int
    proposed_at: float
    attempts: list[Attempt] = field(default_factory=list)
    epochs: dict[int, dict[str, Any]] = field(default_factory=dict)  # epoch number -> epoch_end payload
    status: str = "proposed"  # proposed / running / retry / finished / failed / cancelled
    best_accuracy: float | None = None
    interruptions: int = 0  # attempts lost to a controller crash (not counted against --max-retries)

    @property
    def last_attempt(self) -> int:
        return self.attempts[-1].attempt if self.attempts else 0

    @property
    def failures(self) -> int:
        """Failed attempts that count against --max-retries."""
        return sum(1 for a in self.attempts if a.outcome == "failed" and a.error != INTERRUPTED)

    @property
    def epoch_best(self) -> float | None:
        accs = [e["val_accuracy"] for e in self.epochs.values() if isinstance(e.get("val_accuracy"), (int, float))]
        return max(accs) if accs else None


@dataclass
class RunState:
    run_id: str | None = None
    slots: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    finish_reason: str | None = None
    last_t: float | None = None
    resumed: list[float] = field(default_factory=list)
    trials: dict[str, TrialState] = field(default_factory=dict)
    by_arch: dict[str, list[str]] = field(default_factory=dict)  # arch hash -> trial ids
    epoch_events: list[dict[str, Any]] = field(default_factory=list)
    slot_lost: list[dict[str, Any]] = field(default_factory=list)
    events: int = 0
    status_counts: Counter[str] = field(default_factory=Counter)

    def _status(self, tr: TrialState, status: str) -> None:
        self.status_counts[tr.status] -= 1
        self.status_counts[status] += 1
        tr.status = status

    # ---- replay -----------------------------------------------------------------------------------
    def apply(self, ev: dict[str, Any]) -> None:
        kind = ev["type"]
        t = float(ev["t"])
        self.events += 1
        self.last_t = t
        if kind == "run_started":
            self.run_id = ev.get("run_id")
            self.slots = int(ev.get("slots") or 0)
            self.started_at = t
        elif kind == "run_resumed":
            self.resumed.append(t)
        elif kind == "run_finished":
            self.finished_at = t
            self.finish_reason = ev.get("reason")
        elif kind == "trial_proposed":
            tr = TrialState(
                trial=ev["trial"], seq=len(self.trials), arch_hash=ev.get("arch_hash", ""),
                parent=ev.get("parent"), morphisms=list(ev.get("morphisms") or []),
                hparams=dict(ev.get("hparams") or {}), hparam_source=ev.get("hparam_source", ""),
                round=int(ev.get("round") or 0), epoch_budget=int(ev.get("epoch_budget") or 0), proposed_at=t)
            self.trials[tr.trial] = tr
            self.status_counts[tr.status] += 1
            self.by_arch.setdefault(tr.arch_hash, []).append(tr.trial)
        elif kind == "trial_started":
            tr = self.trials.get(ev.get("trial"))
            if tr is None:  # not proposed: a broken log (verify names it); nothing to track
                return
            tr.attempts.append(Attempt(tr.trial, int(ev["attempt"]), int(ev["slot"]), t,
                                       list(ev.get("nodes") or []), int(ev.get("devices") or 1)))
            self._status(tr, "running")
        elif kind == "epoch_end":
            tr = self.trials.get(ev.get("trial"))
            if tr is not None:
                tr.epochs[int(ev["epoch"])] = ev
            self.epoch_events.append(ev)
        elif kind in TERMINAL:
            tr = self.trials.get(ev.get("trial"))
            if tr is None:
                return
            att = self._attempt(tr, int(ev["attempt"]))
            outcome = kind.removeprefix("trial_")
            if att is not None and att.outcome is None:
                att.ended, att.outcome, att.error = t, outcome, ev.get("error")
            if kind == "trial_finished":
                self._status(tr, "finished")
                tr.best_accuracy = ev.get("best_accuracy")
            elif kind == "trial_failed":
                if ev.get("error") == INTERRUPTED:
                    tr.interruptions += 1
                self._status(tr, "retry" if ev.get("retry") else "failed")
            else:
                self._status(tr, "cancelled")
        elif kind == "slot_lost":
            self.slot_lost.append(ev)

    @staticmethod
    def _attempt(tr: TrialState, number: int) -> Attempt | None:
        for att in reversed(tr.attempts):
            if att.attempt == number:
                return att
        return None

    @classmethod
    def load(cls, run_dir: str | Path, also: Callable[[dict[str, Any]], Any] | None = None) -> RunState:
        """Replay a run's log (a line cut short by a crash is ignored, as the writer does).

        `also` is called with every event too (to feed another consumer in the same pass).
        """
        state = cls()
        for event in iter_events(Path(run_dir) / "events.jsonl", allow_partial_tail=True):
            state.apply(event.data)
            if also is not None:
                also(event.data)
        return state

    # ---- questions ----------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def running(self) -> list[Attempt]:
        return [a for tr in self.trials.values() for a in tr.attempts if a.outcome is None]

    def waiting(self) -> list[TrialState]:
        """Trials proposed but not started, or failed and due for a retry (in proposal order)."""
        if not (self.status_counts["proposed"] or self.status_counts["retry"]):
            return []
        return [tr for tr in self.trials.values() if tr.status in ("proposed", "retry")]

    def count(self, status: str) -> int:
        return self.status_counts[status]

    def best_accuracy(self) -> float | None:
        accs = [e["val_accuracy"] for e in self.epoch_events if isinstance(e.get("val_accuracy"), (int, float))]
        return max(accs) if accs else None

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


def read_run_json(run_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "run.json").read_text())
