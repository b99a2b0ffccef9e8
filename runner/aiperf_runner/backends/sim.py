"""The `sim` backend: thousands of slots on a laptop, for measuring the controller at scale.

Every attempt of the trial program (`python -m aiperf_runner.train.trial TRIAL_DIR --attempt N`)
is a fake trial that trains nothing: it writes the trial's own hash-chained `events.jsonl` as the
real program would (`epoch_end` after each epoch, `trial_result` at the end, `trial_error` on a
failure), at the moments a model of the hardware gives. No process and no thread per attempt: one
scheduler thread keeps every running attempt in a heap by its next due time, so 4,096 slots cost a
heap of 4,096 entries. Any other command (the backend conformance suite's stand-in) runs as the
`inprocess` backend runs it, in a thread.

The model (backend options, all optional):

- epoch time = (train FLOP/image x train images + eval FLOP/image x val images) / (`flops_per_s`
  x devices of the slot x the slot's speed), FLOPs of the trial's graph by `spec/flops.py` under
  the run's rules, image counts from `trial.json`'s dataset; times a log-normal noise of sigma
  `noise` (default 0.05). Default `flops_per_s` 1e9 per device.
- slot speeds: 1 +- `slot_spread` (default 0), fixed per slot index and `seed`.
- `straggler_rate` (default 0): share of attempts whose every epoch takes `straggler_factor`
  (default 3) times as long.
- `failure_rate` (default 0): share of attempts that fail (a `trial_error`, exit status 1) at an
  epoch drawn uniformly among those they would run.
- accuracy: synthetic and deterministic per architecture: a ceiling that grows with the log of the
  graph's FLOPs (plus +-0.02 from a digest of graph.json), approached epoch by epoch. It is there so
  that the search has a signal, not to model any dataset.

Clock: simulated time is wall time (no acceleration). `started_at` / `ended_at` of an epoch are the
real `time.time()` of the moments the model gives, and the controller stamps its own lines with the
same clock, so the log keeps every invariant a real run's has (an epoch ends before the line that
copies it; the score's clock is the run's clock) and `verify` checks it unchanged. Accelerating
would need one clock shared by the controller, its log writer and the score, for no gain here: a
shorter trial (`flops_per_s` higher) loads the controller exactly as an accelerated long one would,
in events per real second. A retried attempt continues after the last epoch in the trial's log,
as the real program does from its checkpoint.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import math
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiperf_runner.backends.base import Backend, LaunchSpec, Slot, TrialHandle
from aiperf_runner.backends.inprocess import CANCELLED, InProcessHandle, module_target
from aiperf_runner.backends.options import BackendOptionError, BackendOptions
from aiperf_runner.rundir.config import TRIAL_MODULE
from aiperf_runner.spec.eventlog import EventWriter, iter_events
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.graph import Graph
from aiperf_runner.spec.proof import EVENT as EPOCH_STATES
from aiperf_runner.spec.proof import stand_in_states
from aiperf_runner.spec.records import EpochEnd

SIM_ERROR = "simulated failure"
_UNPLANNED = random.Random(0)


@dataclass(frozen=True)
class SimModel:
    """How long a simulated epoch takes, and how often attempts fail or straggle."""

    flops_per_s: float = 1e9
    noise: float = 0.05
    slot_spread: float = 0.0
    straggler_rate: float = 0.0
    straggler_factor: float = 3.0
    failure_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        """BackendOptionError for a model that makes no sense (the backend's options are one)."""
        if self.flops_per_s <= 0 or self.noise < 0 or not 0 <= self.slot_spread < 1 or self.straggler_factor < 1:
            raise BackendOptionError(f"sim backend: bad model {self}")
        if not (0 <= self.straggler_rate <= 1 and 0 <= self.failure_rate <= 1):
            raise BackendOptionError("sim backend: straggler_rate and failure_rate are shares between 0 and 1")

    def slot_speed(self, slot: int) -> float:
        return 1.0 + self.slot_spread * (2.0 * random.Random(f"{self.seed}/slot/{slot}").random() - 1.0)


@dataclass(frozen=True)
class SimOptions(BackendOptions, SimModel):
    """`slots` (default 1), `devices_per_slot` (default 1), and the model's fields (`SimModel`, the
    module's docstring): declared once, there."""


def accuracy(arch_hash: str, train_flops: float, epoch: int, budget: int) -> float:
    """The synthetic validation accuracy after `epoch` of `budget` epochs (see the module's docstring)."""
    jitter = (int(arch_hash[:8], 16) / 0xFFFFFFFF - 0.5) * 0.04
    ceiling = min(0.97, 0.5 + 0.04 * math.log2(1.0 + train_flops / 1e6) + jitter)
    return max(0.0, ceiling * (1.0 - 0.5 ** (epoch + 1)) * (0.9 + 0.1 * min(1.0, epoch / max(budget, 1))))


@dataclass(order=True)
class _Due:
    at: float
    order: int
    attempt: SimAttempt = field(compare=False)


class SimAttempt(TrialHandle):
    """One simulated attempt; the scheduler advances it, the controller polls it."""

    def __init__(self, spec: LaunchSpec, slot: Slot) -> None:
        self.spec = spec
        self.slot = slot
        self.returncode: int | None = None
        self.cancelled = False
        self.error = ""
        self.writer: EventWriter | None = None
        self.epoch = 0  # last epoch written
        self.budget = 0
        self.commit_every = 0  # trial.json's commit_every_steps (0: no epoch_states lines)
        self.fail_at: int | None = None
        self.epoch_s = 0.0
        self.arch_hash = ""
        self.train_flops = 0.0
        self.dataset: dict[str, Any] = {}
        self.rng = _UNPLANNED  # its own generator once planned (seeding one from os.urandom costs 80 us)
        self.started = 0.0
        self.best = 0.0
        self.backend: SimBackend | None = None
        self.lock = threading.Lock()  # held while the scheduler advances it, and by cancel()

    def poll(self) -> int | None:
        return self.returncode

    def cancel(self) -> None:
        if self.backend is not None:
            self.backend.cancel(self)

    def describe_failure(self) -> str:
        if self.cancelled:
            return "cancelled"
        return self.error or ("" if not self.returncode else f"exit status {self.returncode}")


def _attempt_arg(argv: tuple[str, ...]) -> int:
    return int(argv[argv.index("--attempt") + 1]) if "--attempt" in argv else 1


class SimBackend(Backend):
    """Simulated attempts on one scheduler thread; options: `SimOptions`."""

    name = "sim"
    options_class = SimOptions
    options: SimOptions

    def __init__(self, run_dir: Path, **options: Any) -> None:
        super().__init__(run_dir, **options)
        self.model: SimModel = self.options
        self._slots = [Slot(index=i, nodes=("localhost",), devices_per_node=self.devices_per_slot, device_type="cpu")
                       for i in range(self.requested_slots or 1)]
        self._heap: list[_Due] = []
        self._order = itertools.count()
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # the scheduler waits on it
        self._news_cond = threading.Condition(lock)  # the controller waits on it (wait_changed)
        self._news: set[TrialHandle] = set()
        self._stopped = False
        self._threads: list[InProcessHandle] = []
        self._live: set[SimAttempt] = set()
        self._thread = threading.Thread(target=self._loop, name="sim-backend", daemon=True)
        self._thread.start()

    def slots(self) -> list[Slot]:
        return list(self._slots)

    def system_facts(self) -> dict[str, Any]:
        return {"nodes": 1, "simulated": True}

    def launch(self, spec: LaunchSpec, slot: Slot) -> TrialHandle:
        argv = spec.argv
        if "-m" not in argv or argv[argv.index("-m") + 1] != TRIAL_MODULE:
            for path in (spec.stdout, spec.stderr):  # a simulated trial prints nothing: no files for it
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            handle = InProcessHandle(spec, slot, module_target)
            self._threads = [h for h in self._threads if h.poll() is None] + [handle]
            return handle
        attempt = SimAttempt(spec, slot)
        attempt.backend = self
        with self._cond:
            self._live.add(attempt)
            self._push(time.time(), attempt)  # planned on the scheduler's thread, not the controller's
        return attempt

    def wait_changed(self, timeout: float) -> set[TrialHandle] | None:
        """The attempts that wrote a line or ended since the last call (the scheduler says so);
        threads running other commands (the conformance suite's) are reported as news too."""
        with self._news_cond:
            if not self._news:
                self._news_cond.wait(timeout)
            news, self._news = self._news, set()
        if self._threads:
            news.update(self._threads)
        return news

    def cancel(self, attempt: SimAttempt) -> None:
        with attempt.lock:  # the scheduler writes under this lock: after it, nothing more is written
            if attempt.returncode is None:
                attempt.cancelled = True
                self._close(attempt, CANCELLED)

    def shutdown(self) -> None:
        with self._cond:
            live = list(self._live)
        for attempt in live:
            self.cancel(attempt)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for handle in self._threads:
            handle.cancel()
        self._threads = []
        self._thread.join(timeout=5)

    # ---- the scheduler -------------------------------------------------------------------------
    # Locks: the backend's (`_cond`, `_news_cond`) guards the heap, the live set and the news, and
    # is held only for those; an attempt's own lock is held while its files are written. Never the
    # backend's first and then an attempt's, so the controller (launch, wait_changed) never waits
    # for the scheduler's file work.
    def _push(self, at: float, attempt: SimAttempt) -> None:
        heapq.heappush(self._heap, _Due(at, next(self._order), attempt))
        if self._heap[0].attempt is attempt:
            self._cond.notify_all()

    def _close(self, attempt: SimAttempt, rc: int) -> None:
        if attempt.writer is not None:
            attempt.writer.close()
            attempt.writer = None
        attempt.returncode = rc
        with self._cond:
            self._live.discard(attempt)
        self._tell(attempt)

    def _tell(self, attempt: SimAttempt) -> None:
        with self._news_cond:
            self._news.add(attempt)
            self._news_cond.notify_all()

    def _next_due(self) -> _Due | None:
        """The next attempt due (waiting for it), or None once stopped."""
        with self._cond:
            while not self._stopped:
                now = time.time()
                if self._heap and self._heap[0].at <= now:
                    return heapq.heappop(self._heap)
                self._cond.wait(timeout=None if not self._heap else self._heap[0].at - now)
            return None

    def _loop(self) -> None:
        while (due := self._next_due()) is not None:
            attempt, following = due.attempt, None
            with attempt.lock:
                if attempt.returncode is not None:
                    continue  # cancelled while waiting
                try:
                    following = self._advance(attempt, due.at)
                except Exception as exc:  # noqa: BLE001 - a broken trial directory fails its attempt
                    attempt.error = f"{type(exc).__name__}: {exc}"
                    self._close(attempt, 1)
            if following is not None:
                with self._cond:
                    self._push(following, attempt)

    def _advance(self, attempt: SimAttempt, at: float) -> float | None:
        """Plan or end an epoch; when the attempt goes on, the time its next epoch ends."""
        if attempt.writer is None:
            self._plan(attempt, at)
        else:
            self._end_epoch(attempt, at)
        if attempt.returncode is not None:
            return None
        return at + attempt.epoch_s * math.exp(attempt.rng.gauss(0.0, self.model.noise))

    def _plan(self, attempt: SimAttempt, at: float) -> None:
        trial_dir = attempt.spec.trial_dir
        trial = json.loads((trial_dir / "trial.json").read_text())
        text = (trial_dir / "graph.json").read_bytes()
        counts = flops_per_image(Graph.from_json(json.loads(text)), trial.get("rules") or "v2")
        attempt.dataset = trial["dataset"]
        attempt.budget = int(trial["epoch_budget"])
        attempt.commit_every = int(trial.get("commit_every_steps") or 0)
        # The accuracy's jitter needs a digest of the architecture, not its canonical hash (which
        # costs a millisecond a trial, already spent by the search and the score).
        attempt.arch_hash = hashlib.sha256(text).hexdigest()
        attempt.train_flops = float(counts.train)
        number = _attempt_arg(attempt.spec.argv)
        attempt.rng = random.Random(f"{self.model.seed}/{attempt.spec.trial_id}/{number}")
        m = self.model
        work = counts.train * attempt.dataset["train_images"] + counts.eval * attempt.dataset["val_images"]
        attempt.epoch_s = float(work) / (m.flops_per_s * attempt.slot.world_size * m.slot_speed(attempt.slot.index))
        if attempt.rng.random() < m.straggler_rate:
            attempt.epoch_s *= m.straggler_factor
        log = trial_dir / "events.jsonl"
        for event in (iter_events(log, allow_partial_tail=True) if log.exists() else ()):
            if event.data.get("type") == "epoch_end":  # a retry continues after the checkpointed epoch
                attempt.epoch = max(attempt.epoch, int(event.data["epoch"]))
                attempt.best = max(attempt.best, float(event.data["val_accuracy"]))
        if attempt.rng.random() < m.failure_rate and attempt.epoch < attempt.budget:
            attempt.fail_at = attempt.rng.randint(attempt.epoch + 1, attempt.budget)
        # Flushed, not fsync'ed line by line: a real trial's fsync happens on its own node, not here.
        attempt.writer = EventWriter(log, durability="none")
        attempt.started = at
        if attempt.epoch >= attempt.budget:
            self._result(attempt)

    def _end_epoch(self, attempt: SimAttempt, at: float) -> None:
        writer, trial = attempt.writer, attempt.spec.trial_id
        assert writer is not None
        number = _attempt_arg(attempt.spec.argv)
        epoch = attempt.epoch + 1
        if attempt.fail_at == epoch:
            writer.append("trial_error", trial=trial, attempt=number, error=SIM_ERROR)
            attempt.error = SIM_ERROR
            self._close(attempt, 1)
            return
        acc = accuracy(attempt.arch_hash, attempt.train_flops, epoch, attempt.budget)
        if attempt.commit_every:  # stand-ins: a simulated trial has no state to commit (nor to re-execute)
            writer.append(EPOCH_STATES, **stand_in_states(trial, number, epoch, int(attempt.dataset["train_images"]),
                                                          attempt.commit_every))
        writer.append("epoch_end", **EpochEnd(trial=trial, attempt=number, epoch=epoch,
                                              images_trained=int(attempt.dataset["train_images"]),
                                              images_evaluated=int(attempt.dataset["val_images"]), val_accuracy=acc,
                                              val_loss=-math.log(max(acc, 1e-6)), started_at=attempt.started,
                                              ended_at=at, seconds=at - attempt.started).as_event())
        attempt.epoch, attempt.started, attempt.best = epoch, at, max(attempt.best, acc)
        if epoch >= attempt.budget:
            self._result(attempt)
        else:
            self._tell(attempt)

    def _result(self, attempt: SimAttempt) -> None:
        assert attempt.writer is not None  # no weights: a simulated trial has none to keep
        attempt.writer.append("trial_result", trial=attempt.spec.trial_id, attempt=_attempt_arg(attempt.spec.argv),
                              epochs=attempt.epoch, best_accuracy=attempt.best, reason="budget")
        self._close(attempt, 0)
