"""Hyper-parameter search: optuna's TPE (ask/tell), maximising validation accuracy.

The space holds only what the trial really applies: batch size per device, learning rate (SGD,
momentum 0.9 fixed), weight decay, label smoothing, dropout before the classifier. `kernel_size` is
part of every point but fixed at 3 and never searched: it only feeds the v1-compat FLOP quirk.

Where a trial's hyper-parameters come from (`source`):

- `seed` — the preset's defaults (the first trial, or any trial without a known parent);
- `inherited` — the parent trial's point (the child of a morphism starts where its parent trained);
- `tpe` — asked from the TPE sampler (random for the first `n_startup_trials` results).

TPE sees a bounded window of the history (the most recent and the best results; the rule is in
search/tpewindow.py), so a proposal costs the same at 20,000 results as at 1,000. With
`start(depth)`, TPE points are asked ahead on a thread of their own and results are applied there:
`suggest` and `tell` never wait on a fit. A trial whose round asks TPE while no point is ready
inherits its parent's point instead (source `inherited`, as logged); without a parent it waits for
one to be asked.

Interface (the controller's): `suggest(trial_id, parent, round) -> (hparams, source)`,
`tell(trial_id, accuracy)`.

Policy, by round (round r = trial sequence // slots): rounds before `tpe_from_round` (3) inherit
(or take the seed point); from round 3 on, odd rounds ask TPE and even rounds inherit (a child
without a known parent asks TPE), so TPE proposals appear from round 3 and children still inherit.

Every result is paired with its trial by id: `tell(trial_id, accuracy)`. Points that did not come
from TPE are added to the study as completed trials too, so TPE learns from every result. Resume:
`HparamSearch.from_history([(trial_id, hparams, accuracy or None), ...])`.

The logic above is `TpeHparamSearch`'s, which AIPerf-LLM's search (search/llmhparams.py) shares:
`HparamSearch` adds the image space, the seed point of a preset and the result (accuracy, maximised).

optuna is imported lazily (it comes with the `train` extra).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from aiperf_runner.search.protocols import HparamOptimiser
from aiperf_runner.search.tpewindow import BEST, REBUILD_EVERY, RECENT, TpeProposer
from aiperf_runner.spec.presetfacts import KERNEL_SIZE, HparamSpace
from aiperf_runner.spec.presetfacts import PRESETS as SPEC_PRESETS

if TYPE_CHECKING:
    from typing import Self

SOURCES = ("seed", "inherited", "tpe")


@dataclass(frozen=True)
class Space(HparamSpace):
    """A preset's bounds as the search asks within them (the runner may search less than the spec allows)."""

    def distributions(self) -> dict[str, Any]:
        from optuna.distributions import CategoricalDistribution, FloatDistribution
        return {
            "batch_size": CategoricalDistribution(list(self.batch_sizes)),
            "lr": FloatDistribution(*self.lr, log=True),
            "weight_decay": FloatDistribution(*self.weight_decay, log=True),
            "label_smoothing": FloatDistribution(*self.label_smoothing),
            "dropout": FloatDistribution(*self.dropout),
        }

    def contains(self, hp: Mapping[str, Any]) -> bool:
        return not self.problems(hp)


# The bounds are the spec's (spec/presetfacts.py): integrity.bound checks every trial's point against them.
# The runner may search less than the spec allows, never more. smoke keeps its batch size at the seed's
# 32: its tiny model is overhead-bound on a CPU, so a batch of 128 trains 30 % more images per second
# than one of 32 (bench/harness_overhead.py --batch-size, 2,540 against 1,980 img/s), and with TPE
# free to pick it the score followed how many late trials TPE happened to give 128 (5-minute runs at
# 3,650-4,150 img/s, CV 7.9 %): luck of the search, not a property of the machine.
SEARCHED_BATCH_SIZES: dict[str, tuple[int, ...]] = {"smoke": (32,)}
SPACES: dict[str, Space] = {
    name: Space(SEARCHED_BATCH_SIZES.get(name, p.space.batch_sizes), p.space.lr, p.space.weight_decay,
                p.space.label_smoothing, p.space.dropout, p.space.defaults)
    for name, p in SPEC_PRESETS.items()
}


def defaults(preset: str = "smoke") -> dict[str, Any]:
    """The seed point of a preset (what the first trial trains with)."""
    return {**SPACES[preset].defaults, "kernel_size": KERNEL_SIZE}


class SearchSpace(Protocol):
    """What TpeHparamSearch needs of a space: optuna's distributions and a bounds check."""

    def distributions(self) -> dict[str, Any]: ...

    def contains(self, hp: Mapping[str, Any]) -> bool: ...


SpaceT = TypeVar("SpaceT", bound=SearchSpace)


def require_optuna() -> None:
    """Raise a RuntimeError that says how to install optuna when it is missing."""
    try:
        import optuna  # noqa: F401 - only to say what is missing
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("hyper-parameter search needs optuna: pip install 'aiperf-runner[train]'") from exc


class TpeHparamSearch(Generic[SpaceT]):
    """TPE (tpewindow.py) with the seed / inherited / tpe policy by round, each result paired with its
    trial by id: the logic both benchmarks share. A subclass names its space and its seed point, how a
    point is normalised (`_clean`), which keys a parent's `.hparams` must hold, and its result: the
    record key `RESULT`, whether TPE maximises it (`MAXIMISE`; else it is told the negated value), what
    counts as a failure and whether a trial is told only once. Its public `tell` (its argument named
    for the result) calls `_tell`."""

    RESULT: ClassVar[str]             # the result's key in from_history's records
    MAXIMISE: ClassVar[bool]          # TPE maximises: a result to minimise is told to it negated
    NONFINITE_FAILS: ClassVar[bool]   # a non-finite result (a diverged run) is told as a failure
    # True: a trial is told once, whatever it is told (a failure too). False: until it is told a
    # result, so a failure may be followed by one (as the image search has always allowed).
    TOLD_ONCE: ClassVar[bool]
    REQUIRED: ClassVar[tuple[str, ...]]  # keys a parent's `.hparams` must hold to be inherited

    def __init__(self, space: SpaceT, seed: int, n_startup_trials: int, tpe_from_round: int, *,
                 history_recent: int, history_best: int, history_rebuild_every: int) -> None:
        self.space = space
        self.tpe_from_round = tpe_from_round
        self._dists = space.distributions()
        self.tpe = TpeProposer(self._dists, seed, n_startup_trials, recent=history_recent, best=history_best,
                               rebuild_every=history_rebuild_every)
        self._points: dict[str, dict[str, Any]] = {}    # trial id -> hyper-parameters
        self._sources: dict[str, str] = {}              # trial id -> source
        self._open: dict[str, str] = {}                 # trial id -> its TPE point's key (asked, not told)
        self._told: set[str] = set()                    # trial ids `tell` answers False for
        self._results: dict[str, float] = {}            # trial id -> result (as told, not negated)
        self._lock = threading.Lock()
        self.fallbacks = 0  # TPE rounds' trials that inherited because no TPE point was ready

    # ---- the subclass's ---------------------------------------------------------------------------
    def _seed_point(self) -> Mapping[str, Any]:
        """The point of a trial with source `seed` (before `_clean`)."""
        raise NotImplementedError

    @staticmethod
    def _clean(hp: Mapping[str, Any]) -> dict[str, Any]:
        """`hp` with plain Python types (optuna and JSON hand back numpy or float values)."""
        raise NotImplementedError

    # ---- TPE ------------------------------------------------------------------------------------
    @property
    def study(self) -> Any:
        """The optuna study TPE asks from now: the window (search/tpewindow.py), not the whole history;
        its values are the results, negated where the result is minimised."""
        return self.tpe.study

    def start(self, depth: int) -> Self:
        """Ask TPE points ahead on a thread of their own, keeping `depth` ready (stop() ends it)."""
        self.tpe.start(depth)
        return self

    def stop(self) -> None:
        self.tpe.stop()

    # ---- proposing ------------------------------------------------------------------------------
    def _parent_point(self, parent: Any) -> dict[str, Any] | None:
        """The parent's point: `parent` is a trial id, an object with `.trial` / `.hparams`
        (the controller's TrialState), or None."""
        if parent is None:
            return None
        tid = parent if isinstance(parent, str) else getattr(parent, "trial", None)
        if tid is not None and tid in self._points:
            return self._points[tid]
        hp = getattr(parent, "hparams", None)
        if isinstance(hp, Mapping) and all(hp.get(k) is not None for k in self.REQUIRED):
            return self._clean(hp)
        return None

    def policy(self, parent: Any, round: int) -> str:
        """The source a trial of this round with this parent gets."""
        has_parent = self._parent_point(parent) is not None
        if round < self.tpe_from_round:
            return "inherited" if has_parent else "seed"
        if round % 2 == 1 or not has_parent:
            return "tpe"
        return "inherited"

    def suggest(self, trial_id: str, parent: Any = None, round: int = 0) -> tuple[dict[str, Any], str]:
        """(hyper-parameters, source) for new trial `trial_id`, whose architecture was morphed (grown)
        from trial `parent` (id or an object with `.trial` / `.hparams`, such as the controller's
        TrialState; None for the seed) in round `round`. `tell(trial_id, result)` later pairs the result
        with this point."""
        with self._lock:
            source = self.policy(parent, round)
            key = None
            point = self.tpe.take() if source == "tpe" else None
            parent_point = self._parent_point(parent)
            if source == "tpe" and point is None and self.tpe.started and parent_point is not None:
                source = "inherited"  # no TPE point ready: the launch does not wait for a fit
                self.fallbacks += 1
            if source == "seed":
                hp = dict(self._seed_point())
            elif source == "inherited":
                assert parent_point is not None  # policy() inherits only from a known parent
                hp = dict(parent_point)
            else:
                key, hp = point if point is not None else self.tpe.take_or_ask()
            hp = self._clean(hp)
            self._record(trial_id, hp, source, key)
            return dict(hp), source

    def _record(self, trial_id: str, hp: dict[str, Any], source: str, key: str | None) -> None:
        if source not in SOURCES:
            raise ValueError(f"unknown hyper-parameter source {source!r}")
        self._points[trial_id] = hp
        self._sources[trial_id] = source
        if key is not None:
            self._open[trial_id] = key

    # ---- results --------------------------------------------------------------------------------
    def _tell(self, trial_id: str, result: float | None) -> bool:
        """The result of trial `trial_id` (None: it failed or was cancelled; see NONFINITE_FAILS).
        False if the trial is unknown or already told."""
        with self._lock:
            if trial_id not in self._points or trial_id in self._told:
                return False
            if self.TOLD_ONCE:
                self._told.add(trial_id)
            key = self._open.pop(trial_id, None)
            value = None if result is None else float(result)
            if value is None or (self.NONFINITE_FAILS and not math.isfinite(value)):
                if key is not None:
                    self.tpe.tell(key, None)
                return True
            self._told.add(trial_id)
            self._results[trial_id] = value
            objective = value if self.MAXIMISE else -value
            if key is not None:
                self.tpe.tell(key, objective)
            else:
                params = {k: v for k, v in self._points[trial_id].items() if k in self._dists}
                # an inherited point from outside the space (or lacking a key) teaches nothing
                if set(params) == set(self._dists) and self.space.contains(params):
                    self.tpe.add(params, objective)
            return True

    # ---- state ----------------------------------------------------------------------------------
    def hparams(self, trial_id: str) -> dict[str, Any] | None:
        return dict(self._points[trial_id]) if trial_id in self._points else None

    def source(self, trial_id: str) -> str | None:
        return self._sources.get(trial_id)

    def best(self) -> tuple[str, dict[str, Any], float] | None:
        """(trial id, point, result) of the best result told (highest, or lowest where minimised);
        None before any."""
        with self._lock:
            if not self._results:
                return None
            pick = max if self.MAXIMISE else min
            tid = pick(self._results, key=self._results.__getitem__)
            return tid, dict(self._points[tid]), self._results[tid]

    @classmethod
    def from_history(cls, records: Iterable[Sequence[Any] | Mapping[str, Any]], **kwargs: Any) -> Self:
        """Rebuild from records in proposal order: (trial_id, hparams, result or None[, source]) or
        {"trial", "hparams", RESULT ("accuracy" or "loss"), "hparam_source" (or "source")}; kwargs as
        for the constructor."""
        search = cls(**kwargs)
        for rec in records:
            if isinstance(rec, Mapping):
                tid, hp, result = rec["trial"], rec["hparams"], rec.get(cls.RESULT)
                src = rec.get("hparam_source") or rec.get("source") or "seed"
            else:
                tid, hp, result = rec[0], rec[1], rec[2]
                src = rec[3] if len(rec) > 3 else "seed"
            # resumed points are added as completed trials: TPE's open trials do not survive a restart
            with search._lock:
                search._record(tid, search._clean(hp), src, None)
            if result is not None:
                search._tell(tid, result)
        return search


class HparamSearch(TpeHparamSearch[Space]):
    """The image benchmark's search: maximises validation accuracy over a preset's Space."""

    RESULT = "accuracy"
    MAXIMISE = True
    # A NaN accuracy is kept as told (optuna refuses it); a failure may be followed by a result.
    NONFINITE_FAILS = False
    TOLD_ONCE = False
    REQUIRED = ("batch_size",)

    def __init__(self, preset: str = "smoke", seed: int = 0, n_startup_trials: int = 4, tpe_from_round: int = 3,
                 space: Space | None = None, *, rng_seed: int | None = None, history_recent: int = RECENT,
                 history_best: int = BEST, history_rebuild_every: int = REBUILD_EVERY) -> None:
        if rng_seed is not None:
            seed = rng_seed
        require_optuna()
        if space is None and preset not in SPACES:
            raise ValueError(f"unknown preset {preset!r} (known: {', '.join(SPACES)})")
        self.preset = preset
        super().__init__(space or SPACES[preset], seed, n_startup_trials, tpe_from_round,
                         history_recent=history_recent, history_best=history_best,
                         history_rebuild_every=history_rebuild_every)

    def _seed_point(self) -> Mapping[str, Any]:
        return defaults(self.preset)  # the preset's, even where `space` narrows the bounds

    @staticmethod
    def _clean(hp: Mapping[str, Any]) -> dict[str, Any]:
        return _clean(hp)

    def tell(self, trial_id: str, accuracy: float | None) -> bool:
        """The result of trial `trial_id` (None: it failed or was cancelled). False if the trial is
        unknown or already told."""
        return self._tell(trial_id, accuracy)


def _clean(hp: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(hp)
    out.setdefault("kernel_size", KERNEL_SIZE)
    out["batch_size"] = int(out["batch_size"])
    out["kernel_size"] = int(out["kernel_size"])
    for k in ("lr", "weight_decay", "label_smoothing", "dropout"):
        if k in out:
            out[k] = float(out[k])
    return out


# Checked by mypy: the optimiser is what the controller drives (search/protocols.py).
_PROTOCOL_CHECK: type[HparamOptimiser] = HparamSearch

__all__ = ["KERNEL_SIZE", "SOURCES", "SPACES", "HparamSearch", "SearchSpace", "Space", "TpeHparamSearch", "defaults",
           "require_optuna"]
