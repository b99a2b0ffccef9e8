"""TPE over a bounded window of the history, asked ahead of demand on a thread of its own.

Why: optuna's TPE refits on every `ask` from every trial of its study, so one ask grows with the
history (about 0.2-0.7 s at 12,000 results on a 2-core machine) and a run of thousands of slots
would wait on it. Two measures, both here:

1. **Bounded history (the window).** The sampler sees the completed results of a *window*, never the
   whole history. The rule (deterministic, from the order in which results were told):

   - when the window is built it holds the `recent` most recent results and, of the older ones,
     the `best` best (highest accuracy; between equals the earlier told);
   - each result told afterwards joins it, until it holds `recent + best + rebuild_every`
     results; then it is built again by the same rule from the whole history;
   - asked points whose result is still to come (optuna's RUNNING trials, which `constant_liar`
     counts as bad points) are carried over, the `liars` most recently asked; an older one's
     result, when it comes, joins the history (and the window) as a completed point.

   Each build takes a fresh `TPESampler` (optuna ties one to one study), seeded from the search's
   seed and the build's number, so a given sequence of asks and tells always gives the same points.

2. **Asked ahead (the proposer).** `start(depth)` starts a thread that keeps `depth` TPE points
   ready; `take()` hands one out at once (None when none is ready: the caller decides what a trial
   gets instead). Results are queued by `tell` and applied by the thread, so the caller (the
   controller's loop) never waits on a fit. Without `start`, `take_or_ask()` asks in the caller's
   thread, as before.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

RECENT = 512         # most recent results in the window
BEST = 128           # best older results in the window
REBUILD_EVERY = 256  # results told between two builds of the window
LIARS = 128          # asked points without a result carried into a new build


@dataclass(frozen=True)
class Result:
    key: str
    params: dict[str, Any]
    value: float


def window(history: Sequence[Result], recent: int, best: int) -> list[Result]:
    """The window's results, in the history's (told) order: the `recent` last ones and the `best`
    best of the others (highest value; between equals the earlier)."""
    cut = max(0, len(history) - recent)
    older = sorted(range(cut), key=lambda i: (-history[i].value, i))[:best]
    return [history[i] for i in sorted(older)] + list(history[cut:])


class TpeProposer:
    """optuna TPE (multivariate, constant liar) over a bounded window; see the module docstring."""

    def __init__(self, distributions: dict[str, Any], seed: int, n_startup_trials: int, *,
                 recent: int = RECENT, best: int = BEST, rebuild_every: int = REBUILD_EVERY,
                 liars: int = LIARS) -> None:
        import optuna
        self._optuna = optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._dists = distributions
        self.seed = seed
        self.n_startup_trials = n_startup_trials
        self.recent, self.best, self.rebuild_every, self.liars = recent, best, max(1, rebuild_every), liars
        self.history: list[Result] = []
        self._open: dict[str, tuple[dict[str, Any], int | None]] = {}  # key -> (params, number in study)
        self._in_window = 0  # completed results in the current study
        self.builds = 0
        self.asks = 0
        self.ask_seconds = 0.0
        self._ready: deque[tuple[str, dict[str, Any]]] = deque()  # asked ahead: (key, params)
        # results not yet applied: (key, value, the point's params for one that was not asked)
        self._told: deque[tuple[str, float | None, dict[str, Any] | None]] = deque()
        self._cond = threading.Condition()   # guards _ready, _told, depth, stop, error
        self._study_lock = threading.Lock()  # guards the study: held while asking / applying results
        self._depth = 0
        self._stop = False
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._asked = 0  # keys of asked points (under the study lock)
        self._added = 0  # keys of added points (in the caller's thread)
        self.study = self._build([], [])

    # ---- the study --------------------------------------------------------------------------------
    def _build(self, completed: list[Result], carried: list[tuple[str, dict[str, Any]]]) -> Any:
        optuna = self._optuna
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # multivariate TPE is marked experimental
            sampler = optuna.samplers.TPESampler(seed=(self.seed * 1_000_003 + self.builds) % 2**32,
                                                 n_startup_trials=self.n_startup_trials, multivariate=True,
                                                 constant_liar=True)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.add_trials([optuna.trial.create_trial(params=r.params, distributions=self._dists, value=r.value)
                          for r in completed])
        for i, (key, params) in enumerate(carried):  # a new study numbers its trials from 0, in order
            study.add_trial(optuna.trial.create_trial(params=params, distributions=self._dists,
                                                      state=optuna.trial.TrialState.RUNNING))
            self._open[key] = (params, len(completed) + i)
        self.builds += 1
        self._in_window = len(completed)
        return study

    def _rebuild(self) -> None:
        open_keys = list(self._open)  # in ask order
        carried = open_keys[-self.liars:] if self.liars > 0 else []
        for key in open_keys:  # those not carried are told as completed points when their result comes
            self._open[key] = (self._open[key][0], None)
        self.study = self._build(window(self.history, self.recent, self.best),
                                 [(k, self._open[k][0]) for k in carried])

    def _apply(self, key: str, value: float | None, added: dict[str, Any] | None) -> None:
        """One result, under the study lock."""
        params, number = self._open.pop(key, (None, None)) if added is None else (added, None)
        if value is None:
            if number is not None:
                self.study.tell(number, state=self._optuna.trial.TrialState.FAIL)
            return
        if params is None:
            return
        self.history.append(Result(key, params, value))
        if number is not None:
            self.study.tell(number, value)
        else:
            self.study.add_trial(self._optuna.trial.create_trial(params=params, distributions=self._dists,
                                                                 value=value))
        self._in_window += 1
        if self._in_window > self.recent + self.best + self.rebuild_every:
            self._rebuild()

    def _ask(self) -> tuple[str, dict[str, Any]]:
        """One point, under the study lock."""
        t = time.perf_counter()
        trial = self.study.ask(self._dists)
        self.ask_seconds += time.perf_counter() - t
        self.asks += 1
        key = f"tpe{self._asked}"
        self._asked += 1
        self._open[key] = (dict(trial.params), trial.number)
        return key, dict(trial.params)

    def _drain(self) -> None:
        with self._cond:
            told = list(self._told)
            self._told.clear()
        for key, value, added in told:
            self._apply(key, value, added)

    # ---- the caller's side ------------------------------------------------------------------------
    def add(self, params: dict[str, Any], value: float) -> None:
        """A completed point that was not asked of TPE (a seed or inherited point; a resumed one)."""
        self._added += 1
        self._queue(f"ext{self._added}", float(value), dict(params))

    def tell(self, key: str, value: float | None) -> None:
        """The result of an asked point (None: it failed). Applied by the thread when it runs."""
        self._queue(key, value, None)

    def _queue(self, key: str, value: float | None, added: dict[str, Any] | None) -> None:
        with self._cond:
            self._told.append((key, value, added))
            self._cond.notify_all()
        if self._thread is None:
            with self._study_lock:
                self._drain()

    def take(self) -> tuple[str, dict[str, Any]] | None:
        """A point asked ahead, or None when none is ready."""
        with self._cond:
            if self.error is not None:
                raise self.error
            if self._ready:
                point = self._ready.popleft()
                self._cond.notify_all()
                return point
            return None

    def take_or_ask(self) -> tuple[str, dict[str, Any]]:
        """A point asked ahead if one is ready, else one asked now (in the caller's thread)."""
        point = self.take()
        if point is not None:
            return point
        with self._study_lock:
            self._drain()
            return self._ask()

    def fill(self, count: int) -> int:
        """Apply the queued results, then ask `count` points ahead (what the thread does each turn)."""
        with self._study_lock:
            self._drain()
            points = [self._ask() for _ in range(count)]
        with self._cond:
            self._ready.extend(points)
            self._cond.notify_all()
        return len(points)

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def ready(self) -> int:
        with self._cond:
            return len(self._ready)

    # ---- the thread -------------------------------------------------------------------------------
    def start(self, depth: int) -> TpeProposer:
        """Keep `depth` points ready on a thread of its own (named "tpe-proposer")."""
        self._depth = max(1, depth)
        self._thread = threading.Thread(target=self._loop, name="tpe-proposer", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stop and not self._told and len(self._ready) >= self._depth:
                    self._cond.wait()
                if self._stop:
                    return
                want = min(8, self._depth - len(self._ready))  # a few at a time: results between asks
            try:
                self.fill(max(0, want))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller by take()
                with self._cond:
                    self.error = exc
                    self._cond.notify_all()
                return

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)


__all__ = ["BEST", "LIARS", "RECENT", "REBUILD_EVERY", "Result", "TpeProposer", "window"]
