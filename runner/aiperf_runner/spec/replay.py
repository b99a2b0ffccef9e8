"""One fold over an event log: a run's trials, attempts, slots and epochs as the log tells them.

Every reader of a log uses this fold and nothing else: the controller (as it writes, and on
`--resume`), `status` and `report`, verification's score (spec/scoring.py) and checks
(spec/logaudit.py), the service's stored trials, and the trial program's resume (over a trial's own
log). What a running attempt, a repeated epoch or a busy slot is, is decided here only.

`Replay.apply(event)` takes events in log order. Listeners see what the fold decided: every
epoch (`on_epoch`, with whether it counts), every other event (`on_event`), and every departure
from the lifecycle (`on_anomaly(kind, line, message)`, kind one of `ANOMALIES`). Memory is per
trial, not per epoch, unless `keep_epochs` asks for each trial's epoch records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .eventlog import iter_events

INTERRUPTED = "controller interrupted"
"""The `error` of a `trial_failed` the controller logs for attempts a crash of its own cut short."""
TERMINAL = ("trial_finished", "trial_failed", "trial_cancelled")
ANOMALIES = ("lifecycle", "slot_clash", "concurrency", "consistency", "malformed")


@dataclass(eq=False, slots=True)
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


@dataclass(eq=False, slots=True)
class TrialState:
    trial: str
    seq: int = -1  # proposal order; -1 for a trial the log never proposed
    arch_hash: str = ""
    parent: str | None = None
    morphisms: list[str] = field(default_factory=list)
    hparams: dict[str, Any] = field(default_factory=dict)
    hparam_source: str = ""
    round: int = 0
    epoch_budget: int = 0
    proposed_at: float | None = None
    attempts: list[Attempt] = field(default_factory=list)
    status: str = "proposed"  # proposed / running / retry / finished / failed / cancelled
    last_epoch: int = 0  # the highest epoch number logged; an epoch not above it is a repeat
    epochs_counted: int = 0
    epoch_best: float | None = None  # best validation accuracy of its counted epochs
    last_accuracy: float | None = None  # validation accuracy of its last counted epoch (what the audit re-measures)
    last_evaluated: int = 0  # images that epoch evaluated
    best_accuracy: float | None = None  # as its trial_finished says
    ended_t: float | None = None  # time of its last epoch or end line
    interruptions: int = 0  # attempts lost to a controller crash (not counted against --max-retries)
    results: dict[int, dict[str, Any]] = field(default_factory=dict)  # trial log: attempt -> trial_result
    errors: dict[int, str] = field(default_factory=dict)  # trial log: attempt -> trial_error message
    epochs: dict[int, dict[str, Any]] = field(default_factory=dict)  # with keep_epochs: epoch -> epoch_end
    weights_sha256: str | None = None  # its final weights' digest (trial_finished)
    finished_seq: int | None = None  # the line of its trial_finished
    weights: str | None = None  # "kept" / "dropped" (weights_kept / weights_dropped), None: undecided
    weights_reason: str | None = None

    @property
    def proposed(self) -> bool:
        return self.seq >= 0

    @property
    def last_attempt(self) -> int:
        return self.attempts[-1].attempt if self.attempts else 0

    @property
    def failures(self) -> int:
        """Failed attempts that count against --max-retries."""
        return sum(1 for a in self.attempts if a.outcome == "failed" and a.error != INTERRUPTED)

    def attempt(self, number: int) -> Attempt | None:
        for att in reversed(self.attempts):
            if att.attempt == number:
                return att
        return None

    def result_for(self, attempt: int) -> dict[str, Any] | None:
        """The trial program's result for this attempt, else one an earlier attempt logged (the
        program then finds the trial complete and exits at once)."""
        if attempt in self.results:
            return self.results[attempt]
        earlier = [a for a in self.results if a < attempt]
        return self.results[max(earlier)] if earlier else None


class ReplayListener(Protocol):
    """What a listener may implement (each method optional)."""

    def on_epoch(self, ev: Mapping[str, Any], trial: TrialState, attempt: Attempt | None, counted: bool,
                 line: int) -> None: ...

    def on_event(self, ev: Mapping[str, Any], line: int) -> None: ...

    def on_anomaly(self, kind: str, line: int, message: str) -> None: ...


Handler = Callable[["Replay", Mapping[str, Any], float, int], None]


class Replay:
    """The fold. `slots`: the run's slot count when known beforehand (run.json), else run_started's."""

    def __init__(self, *, slots: int | None = None, keep_epochs: bool = False,
                 listeners: tuple[object, ...] = ()) -> None:
        self.keep_epochs = keep_epochs
        self.slots: int | None = slots
        self.run_id: str | None = None
        self.started_at: float | None = None  # the first run_started
        self.finished_at: float | None = None  # the last run_finished
        self.finish_reason: str | None = None
        self.finished_seq: int | None = None  # the sequence number of the (last) run_finished line
        self.run_started = 0
        self.run_started_event: Mapping[str, Any] | None = None  # the first one
        self.run_finished = 0
        self.resumed: list[float] = []
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.events = 0
        self.epoch_lines = 0
        self.repeated_epochs = 0
        self.trials_finished = 0  # trial_finished lines
        self.first_trial_start: float | None = None
        self.max_running = 0  # attempts at once
        self.max_devices_running = 0  # devices of the attempts running at once
        self.max_attempt_devices = 0
        self._devices_running = 0
        self.best_epoch_accuracy: float | None = None
        self.trials: dict[str, TrialState] = {}  # proposed, in proposal order
        self.unproposed: dict[str, TrialState] = {}  # trials with lines but no trial_proposed
        self.by_arch: dict[str, list[str]] = {}  # arch hash -> trial ids
        self.status_counts: Counter[str] = Counter()
        self.slot_lost: list[Mapping[str, Any]] = []
        self.token: Mapping[str, Any] | None = None  # the run token run_started carries (witnessed runs)
        self.heartbeats: list[int] = []  # sequence numbers of the heartbeat lines
        self.witnessed: set[int] = set()  # heartbeats a witness line vouches for
        self.last_receipt: Mapping[str, Any] | None = None  # the last witness line (the receipt chain's end)
        self._active: dict[tuple[str, int], Attempt] = {}
        self._orphaned: set[tuple[str, int]] = set()  # ended without an end line (resume, slot lost)
        self._slot_busy: dict[int, tuple[str, int]] = {}
        self._running: dict[str, int] = {}  # trial -> its running attempt
        self._on_epoch: list[Callable[..., None]] = []
        self._on_event: list[Callable[..., None]] = []
        self._on_anomaly: list[Callable[[str, int, str], None]] = []
        for listener in listeners:
            self.listen(listener)

    def listen(self, listener: object) -> None:
        for name, callbacks in (("on_epoch", self._on_epoch), ("on_event", self._on_event),
                                ("on_anomaly", self._on_anomaly)):
            fn = getattr(listener, name, None)
            if fn is not None:
                callbacks.append(fn)

    @classmethod
    def load(cls, path: str | Path, *, allow_partial_tail: bool = True, **kwargs: Any) -> Replay:
        """Replay a log file (a last line cut short by a crash is ignored, as the writer does)."""
        replay = cls(**kwargs)
        for event in iter_events(path, allow_partial_tail=allow_partial_tail):
            replay.apply(event.data, event.line)
        return replay

    # ---- the fold ----------------------------------------------------------------------------------------
    def apply(self, ev: Mapping[str, Any], line: int = 0) -> None:
        """Take the next event of the log (`line`: its 1-based line number, when known)."""
        try:
            if ev["type"] == "epoch_end":
                self.epoch(ev, line)
                return
            t = float(ev["t"])
            self.events += 1
            if self.first_t is None:
                self.first_t = t
            self.last_t = t
            handler = HANDLERS.get(ev["type"])
            if handler is not None:
                handler(self, ev, t, line or self.events)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self._anomaly("malformed", line, f"{ev.get('type')!r} event not understood ({type(exc).__name__}: {exc})")
            return
        for callback in self._on_event:
            callback(ev, line)

    def epoch(self, ev: Mapping[str, Any], line: int = 0) -> None:
        """`apply` for an `epoch_end` (the bulk of a log)."""
        t = ev["t"]
        self.events += 1
        self.epoch_lines += 1
        if self.first_t is None:
            self.first_t = t
        self.last_t = t
        trial_id = ev["trial"]
        key = (trial_id, ev["attempt"])
        tr = self.trials.get(trial_id) or self._unproposed(trial_id)
        attempt = self._active.get(key)
        if attempt is None and key not in self._orphaned:
            self._anomaly("lifecycle", line, f"epoch of trial {trial_id} attempt {key[1]}, which was never started")
        epoch = ev["epoch"]
        last = tr.last_epoch
        counted = epoch > last
        if counted:
            if epoch != last + 1:
                self._anomaly("lifecycle", line, f"trial {trial_id} epoch {epoch} follows epoch {last} (a gap)")
            tr.last_epoch = epoch
            tr.epochs_counted += 1
            acc = ev["val_accuracy"]
            tr.last_accuracy, tr.last_evaluated = acc, ev["images_evaluated"]
            if tr.epoch_best is None or acc > tr.epoch_best:
                tr.epoch_best = acc
                if self.best_epoch_accuracy is None or acc > self.best_epoch_accuracy:
                    self.best_epoch_accuracy = acc
            if self.keep_epochs:
                tr.epochs[epoch] = dict(ev)
        else:
            self.repeated_epochs += 1
        tr.ended_t = t
        for callback in self._on_epoch:
            callback(ev, tr, attempt, counted, line)

    def _anomaly(self, kind: str, line: int, message: str) -> None:
        for callback in self._on_anomaly:
            callback(kind, line or self.events, message)

    def _unproposed(self, trial_id: str) -> TrialState:
        tr = self.unproposed.get(trial_id)
        if tr is None:
            tr = self.unproposed[trial_id] = TrialState(trial_id)
        return tr

    def trial(self, trial_id: str) -> TrialState | None:
        """The trial's state, proposed or not; None if the log never named it."""
        return self.trials.get(trial_id) or self.unproposed.get(trial_id)

    def all_trials(self) -> Iterator[TrialState]:
        yield from self.trials.values()
        yield from self.unproposed.values()

    def _status(self, tr: TrialState, status: str) -> None:
        if tr.proposed:
            self.status_counts[tr.status] -= 1
            self.status_counts[status] += 1
        tr.status = status

    def _after_finish(self, kind: str, line: int) -> None:
        if self.run_finished:
            self._anomaly("consistency", line, f"{kind} after run_finished")

    # ---- handlers, one per event type ------------------------------------------------------------------
    def _run_started(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        self._after_finish("run_started", line)
        self.run_started += 1
        if self.run_started > 1 or line != 1:
            self._anomaly("consistency", line, "run_started must be the first event, once")
        if self.started_at is None:
            self.started_at = t
            self.run_id = ev.get("run_id")
            self.run_started_event = ev
            token = ev.get("token")
            self.token = token if isinstance(token, Mapping) else None
        if self.slots is None and ev.get("slots") is not None:
            self.slots = int(ev["slots"])

    def _run_resumed(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        self._after_finish("run_resumed", line)
        self.resumed.append(t)
        # The controller was restarted: the attempts it had running end here for the lifecycle
        # (their late epochs may still be copied in; the new controller closes them with an end
        # line); their slots are free again.
        self._orphaned.update(self._active)
        self._active.clear()
        self._devices_running = 0
        self._slot_busy.clear()
        self._running.clear()

    def _run_finished(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        self.run_finished += 1
        if self.run_finished > 1:
            self._anomaly("consistency", line, "run_finished appears more than once")
        self.finished_at = t
        self.finished_seq = ev.get("seq")
        self.finish_reason = ev.get("reason")

    def _trial_proposed(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        self._after_finish("trial_proposed", line)
        trial_id = ev["trial"]
        # Lenient on the payload: the replay also reads logs nobody verified (status, report).
        fields = dict(arch_hash=ev.get("arch_hash") or "", parent=ev.get("parent"),
                      morphisms=list(ev.get("morphisms") or []), hparams=dict(ev.get("hparams") or {}),
                      hparam_source=ev.get("hparam_source") or "", round=int(ev.get("round") or 0),
                      epoch_budget=int(ev.get("epoch_budget") or 0), proposed_at=t)
        tr = self.trials.get(trial_id)
        if tr is not None:
            self._anomaly("lifecycle", line, f"trial {trial_id} proposed twice")
            for name, value in fields.items():
                setattr(tr, name, value)
        else:
            tr = self.unproposed.pop(trial_id, None) or TrialState(trial_id)
            tr.seq = len(self.trials)
            for name, value in fields.items():
                setattr(tr, name, value)
            self.trials[trial_id] = tr
            self.status_counts[tr.status] += 1
        self.by_arch.setdefault(tr.arch_hash, []).append(trial_id)

    def _trial_started(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        self._after_finish("trial_started", line)
        trial_id, number, slot = ev["trial"], int(ev["attempt"]), int(ev["slot"])
        tr = self.trials.get(trial_id)
        if tr is None:
            self._anomaly("lifecycle", line, f"trial {trial_id} started but never proposed")
        key = (trial_id, number)
        if key in self._active or key in self._orphaned:
            self._anomaly("lifecycle", line, f"trial {trial_id} attempt {number} started twice")
        if trial_id in self._running:
            self._anomaly("slot_clash", line, f"trial {trial_id} started on slot {slot} while attempt "
                                              f"{self._running[trial_id]} of it still runs")
        if self.slots is not None and slot >= self.slots:
            self._anomaly("concurrency", line, f"slot {slot} does not exist (the run has {self.slots} slots)")
        owner = self._slot_busy.get(slot)
        if owner is not None:
            self._anomaly("slot_clash", line, f"slot {slot} starts trial {trial_id} while trial {owner[0]} "
                                              f"(attempt {owner[1]}) still runs on it")
            self._drop(owner)
        if self.first_trial_start is None or t < self.first_trial_start:
            self.first_trial_start = t
        attempt = Attempt(trial_id, number, slot, t, list(ev.get("nodes") or []), int(ev.get("devices") or 1))
        if tr is not None:
            tr.attempts.append(attempt)
            self._status(tr, "running")
        self._slot_busy[slot] = key
        self._active[key] = attempt
        self._running[trial_id] = number
        self._devices_running += attempt.devices
        self.max_devices_running = max(self.max_devices_running, self._devices_running)
        self.max_attempt_devices = max(self.max_attempt_devices, attempt.devices)
        n = len(self._active)
        if n > self.max_running:
            self.max_running = n
            if self.slots is not None and n > self.slots:
                self._anomaly("concurrency", line, f"{n} trials running at once with {self.slots} slots")

    def _drop(self, key: tuple[str, int]) -> None:
        """An attempt that stopped being tracked without an end line (its late lines are allowed)."""
        dropped = self._active.pop(key, None)
        if dropped is not None:
            self._orphaned.add(key)
            self._devices_running -= dropped.devices
        if self._running.get(key[0]) == key[1]:
            del self._running[key[0]]

    def _trial_ended(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        kind, trial_id, number = ev["type"], ev["trial"], int(ev["attempt"])
        key = (trial_id, number)
        active = self._active.pop(key, None)
        if self._running.get(trial_id) == number:
            del self._running[trial_id]
        if active is not None:
            self._devices_running -= active.devices
            if self._slot_busy.get(active.slot) == key:
                del self._slot_busy[active.slot]
        elif key in self._orphaned:
            self._orphaned.discard(key)
        else:
            self._anomaly("lifecycle", line, f"{kind} for trial {trial_id} attempt {number}, which is not running")
        if kind == "trial_finished":
            self.trials_finished += 1
        tr = self.trials.get(trial_id)
        if tr is None:
            return
        tr.ended_t = t
        attempt = tr.attempt(number)
        outcome = kind.removeprefix("trial_")
        if attempt is not None and attempt.outcome is None:
            attempt.ended, attempt.outcome, attempt.error = t, outcome, ev.get("error")
            if isinstance(ev.get("nodes"), list):  # where the attempt ran, when trial_started named other nodes
                attempt.nodes = list(ev["nodes"])
        if kind == "trial_finished":
            self._status(tr, "finished")
            tr.best_accuracy = ev.get("best_accuracy")
            tr.weights_sha256 = ev.get("weights_sha256")
            tr.finished_seq = ev.get("seq")
        elif kind == "trial_failed":
            if ev.get("error") == INTERRUPTED:
                tr.interruptions += 1
            self._status(tr, "retry" if ev.get("retry") else "failed")
        else:
            self._status(tr, "cancelled")

    def _slot_lost(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        owner = self._slot_busy.pop(int(ev["slot"]), None)
        if owner is not None:
            self._drop(owner)
        self.slot_lost.append(ev)

    def _heartbeat(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        self.heartbeats.append(int(ev["seq"]))

    def _witness(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        self.witnessed.add(int(ev["heartbeat_seq"]))
        self.last_receipt = ev

    def _weights(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        tr = self.trials.get(ev["trial"])
        if tr is None:
            self._anomaly("lifecycle", line, f"{ev['type']} for trial {ev['trial']}, which was never proposed")
            return
        tr.weights = "kept" if ev["type"] == "weights_kept" else "dropped"
        tr.weights_reason = ev.get("reason")

    def _trial_result(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        tr = self.trials.get(ev["trial"]) or self._unproposed(ev["trial"])
        tr.results[int(ev["attempt"])] = dict(ev)

    def _trial_error(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        tr = self.trials.get(ev["trial"]) or self._unproposed(ev["trial"])
        tr.errors[int(ev["attempt"])] = str(ev["error"])

    def _epoch_states(self, ev: Mapping[str, Any], t: float, line: int) -> None:
        """An epoch's commitments: nothing of the run's story; spec/proof.py's CommitmentAudit listens for them."""


HANDLERS: dict[str, Handler] = {
    "run_started": Replay._run_started,
    "run_resumed": Replay._run_resumed,
    "run_finished": Replay._run_finished,
    "trial_proposed": Replay._trial_proposed,
    "trial_started": Replay._trial_started,
    "trial_finished": Replay._trial_ended,
    "trial_failed": Replay._trial_ended,
    "trial_cancelled": Replay._trial_ended,
    "slot_lost": Replay._slot_lost,
    "heartbeat": Replay._heartbeat,
    "witness": Replay._witness,
    "weights_kept": Replay._weights,
    "weights_dropped": Replay._weights,
    "trial_result": Replay._trial_result,
    "trial_error": Replay._trial_error,
    "epoch_states": Replay._epoch_states,
}
"""Every event type but `epoch_end` (Replay.epoch); tests check it covers spec/schema.py's EVENTS."""

HANDLED = frozenset(HANDLERS) | {"epoch_end"}
