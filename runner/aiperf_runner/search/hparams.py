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

optuna is imported lazily (it comes with the `train` extra).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiperf_runner.search.protocols import HparamOptimiser
from aiperf_runner.search.tpewindow import BEST, REBUILD_EVERY, RECENT, TpeProposer
from aiperf_runner.spec.presetfacts import KERNEL_SIZE, HparamSpace
from aiperf_runner.spec.presetfacts import PRESETS as SPEC_PRESETS

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


class HparamSearch:
    def __init__(self, preset: str = "smoke", seed: int = 0, n_startup_trials: int = 4, tpe_from_round: int = 3,
                 space: Space | None = None, *, rng_seed: int | None = None, history_recent: int = RECENT,
                 history_best: int = BEST, history_rebuild_every: int = REBUILD_EVERY) -> None:
        if rng_seed is not None:
            seed = rng_seed
        try:
            import optuna  # noqa: F401 - only to say what is missing
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise RuntimeError("hyper-parameter search needs optuna: pip install 'aiperf-runner[train]'") from exc
        if space is None and preset not in SPACES:
            raise ValueError(f"unknown preset {preset!r} (known: {', '.join(SPACES)})")
        self.preset = preset
        self.space = space or SPACES[preset]
        self.tpe_from_round = tpe_from_round
        self._dists = self.space.distributions()
        self.tpe = TpeProposer(self._dists, seed, n_startup_trials, recent=history_recent, best=history_best,
                               rebuild_every=history_rebuild_every)
        self._points: dict[str, dict[str, Any]] = {}    # trial id -> hyper-parameters
        self._sources: dict[str, str] = {}              # trial id -> source
        self._open: dict[str, str] = {}                 # trial id -> its TPE point's key (asked, not told)
        self._results: dict[str, float] = {}            # trial id -> accuracy
        self._lock = threading.Lock()
        self.fallbacks = 0  # TPE rounds' trials that inherited because no TPE point was ready

    @property
    def study(self) -> Any:
        """The optuna study TPE asks from now: the window (search/tpewindow.py), not the whole history."""
        return self.tpe.study

    def start(self, depth: int) -> HparamSearch:
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
        if isinstance(hp, Mapping) and hp.get("batch_size") is not None:
            return _clean(hp)
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
        """(hyper-parameters, source) for new trial `trial_id`, whose architecture was morphed from
        trial `parent` (id or TrialState; None for the seed) in round `round`. `tell(trial_id, accuracy)`
        later pairs the result with this point."""
        with self._lock:
            source = self.policy(parent, round)
            key = None
            point = self.tpe.take() if source == "tpe" else None
            if source == "tpe" and point is None and self.tpe.started and self._parent_point(parent) is not None:
                source = "inherited"  # no TPE point ready: the launch does not wait for a fit
                self.fallbacks += 1
            if source == "seed":
                hp = defaults(self.preset)
            elif source == "inherited":
                hp = dict(self._parent_point(parent))  # type: ignore[arg-type]
            else:
                key, params = point if point is not None else self.tpe.take_or_ask()
                hp = {**params, "kernel_size": KERNEL_SIZE}
            hp = _clean(hp)
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
    def tell(self, trial_id: str, accuracy: float | None) -> bool:
        """The result of trial `trial_id` (None: it failed or was cancelled). False if the trial is
        unknown or already told."""
        with self._lock:
            if trial_id not in self._points or trial_id in self._results:
                return False
            key = self._open.pop(trial_id, None)
            if accuracy is None:
                if key is not None:
                    self.tpe.tell(key, None)
                return True
            value = float(accuracy)
            self._results[trial_id] = value
            if key is not None:
                self.tpe.tell(key, value)
            else:
                params = {k: v for k, v in self._points[trial_id].items() if k in self._dists}
                if set(params) == set(self._dists) and self.space.contains(params):
                    self.tpe.add(params, value)
            return True

    # ---- state ----------------------------------------------------------------------------------
    def hparams(self, trial_id: str) -> dict[str, Any] | None:
        return dict(self._points[trial_id]) if trial_id in self._points else None

    def source(self, trial_id: str) -> str | None:
        return self._sources.get(trial_id)

    def best(self) -> tuple[str, dict[str, Any], float] | None:
        with self._lock:
            if not self._results:
                return None
            tid = max(self._results, key=self._results.__getitem__)
            return tid, dict(self._points[tid]), self._results[tid]

    @classmethod
    def from_history(cls, records: Iterable[Sequence[Any] | Mapping[str, Any]], **kwargs: Any) -> HparamSearch:
        """Rebuild from records in proposal order: (trial_id, hparams, accuracy or None[, source]) or
        {"trial", "hparams", "accuracy", "hparam_source" (or "source")}."""
        search = cls(**kwargs)
        for rec in records:
            if isinstance(rec, Mapping):
                tid, hp, acc = rec["trial"], rec["hparams"], rec.get("accuracy")
                src = rec.get("hparam_source") or rec.get("source") or "seed"
            else:
                tid, hp, acc = rec[0], rec[1], rec[2]
                src = rec[3] if len(rec) > 3 else "seed"
            # resumed points are added as completed trials: TPE's open trials do not survive a restart
            with search._lock:
                search._record(tid, _clean(hp), src, None)
            if acc is not None:
                search.tell(tid, acc)
        return search


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

__all__ = ["KERNEL_SIZE", "SOURCES", "SPACES", "HparamSearch", "Space", "defaults"]
