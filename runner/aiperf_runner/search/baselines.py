"""Baseline searches to measure the architecture search against (bench/search_quality.py).

Both have the interface of `bayesian.ArchitectureSearch` that the controller uses (`propose()` ->
`Proposal | None`, `observe(arch_hash, accuracy)`, `register(...)`, `from_history(seed_graph,
history)`), so a run with either differs from a normal run only in how architectures are chosen:

- `RandomMorphismSearch`: the seed first, then a parent drawn uniformly from the architectures
  with a result (before any result: from those proposed), changed by 1 to `max_chain` random
  morphisms (deeper / wider / skip, `morphism.random_morphism`, the same operations and chain
  length as the Bayesian search); an architecture already proposed is never proposed again.
- `SeedOnlySearch`: the seed architecture for every trial, so only the hyper-parameters change
  (`seed_only_factory` pairs it with a TPE that asks from the first trial on).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aiperf_runner.search import morphism
from aiperf_runner.search.bayesian import Proposal
from aiperf_runner.spec.graph import Graph
from aiperf_runner.spec.seeds import within_bounds


class _Recorded:
    """What both baselines keep: the architectures proposed and the results, fed thread-safely."""

    def __init__(self, seed_graph: Graph, rng_seed: int = 0) -> None:
        seed_graph.validate()
        self.seed_graph = seed_graph.copy()
        self.seed_hash = seed_graph.hash()
        self.rng_seed = rng_seed
        self._rng = random.Random(rng_seed)
        self._lock = threading.Lock()
        self._graphs: dict[str, Graph] = {}  # every proposed or registered architecture
        self._results: dict[str, list[float]] = {}
        self.proposals = 0

    def register(self, graph: Graph, parent_hash: str | None = None, morphisms: Sequence[str] = (),
                 arch_hash: str | None = None) -> str:
        h = arch_hash or graph.hash()
        with self._lock:
            self._graphs.setdefault(h, graph.copy())
        return h

    def observe(self, arch_hash: str, accuracy: float, graph: Graph | None = None) -> None:
        with self._lock:
            if arch_hash not in self._graphs:
                if graph is None:
                    raise KeyError(f"unknown architecture {arch_hash[:12]}: register() it or pass its graph")
                self._graphs[arch_hash] = graph.copy()
            self._results.setdefault(arch_hash, []).append(float(accuracy))

    def best(self) -> tuple[str, float] | None:
        with self._lock:
            if not self._results:
                return None
            h = max(self._results, key=lambda k: max(self._results[k]))
            return h, max(self._results[h])

    @classmethod
    def from_history(cls, seed_graph: Graph, history: Iterable[Mapping[str, Any]], **kwargs: Any) -> Any:
        """Rebuild from the log's trials in proposal order (as `ArchitectureSearch.from_history`)."""
        search = cls(seed_graph, **kwargs)
        count = 0
        for rec in history:
            g = rec["graph"] if isinstance(rec["graph"], Graph) else Graph.from_json(rec["graph"])
            h = search.register(g, rec.get("parent_hash"), rec.get("morphisms") or (), rec.get("arch_hash"))
            if rec.get("accuracy") is not None:
                search.observe(h, rec["accuracy"])
            count += 1
        search._rng = random.Random(f"{search.rng_seed}:{count}")
        return search


class RandomMorphismSearch(_Recorded):
    """Random search over the morphisms of the Bayesian search: a random parent, a random chain."""

    def __init__(self, seed_graph: Graph, rng_seed: int = 0, max_chain: int = 2, max_filters: int | None = None,
                 attempts: int = 200, max_train_flops: int | None = None, max_layers: int | None = None) -> None:
        super().__init__(seed_graph, rng_seed)
        self.max_chain = max_chain
        self.max_filters = max_filters
        self.attempts = attempts
        self.max_train_flops = max_train_flops  # the Bayesian search's bounds, for a fair comparison
        self.max_layers = max_layers

    def propose(self) -> Proposal | None:
        with self._lock:
            if self.seed_hash not in self._graphs:
                self._graphs[self.seed_hash] = self.seed_graph.copy()
                self.proposals += 1
                return Proposal(self.seed_graph.copy(), None, [], self.seed_hash)
            pool = sorted(self._results) or sorted(self._graphs)
            for _ in range(self.attempts):
                parent = self._rng.choice(pool)
                graph, ops, details = self._graphs[parent], [], []
                for _step in range(self._rng.randint(1, self.max_chain)):
                    try:
                        graph, desc = morphism.random_morphism(graph, self._rng, max_filters=self.max_filters,
                                                               check=False)
                    except morphism.MorphismError:
                        break
                    ops.append(desc["op"])
                    details.append(desc)
                if not ops:
                    continue
                if not within_bounds(graph, self.max_train_flops, self.max_layers):
                    continue
                h = graph.hash()
                if h in self._graphs:
                    continue
                graph.validate()
                self._graphs[h] = graph
                self.proposals += 1
                return Proposal(graph.copy(), parent, ops, h, details)
            return None


class SeedOnlySearch(_Recorded):
    """The seed architecture, every time: a search over hyper-parameters only."""

    def propose(self) -> Proposal | None:
        with self._lock:
            self._graphs.setdefault(self.seed_hash, self.seed_graph.copy())
            self.proposals += 1
            return Proposal(self.seed_graph.copy(), None, [], self.seed_hash)


def _searches(preset: Any, dataset: Mapping[str, Any], seed: int, history: list[dict[str, Any]] | None,
              arch_cls: type[_Recorded], **hparam_kwargs: Any) -> tuple[Any, Any]:
    from aiperf_runner.search.hparams import HparamSearch
    from aiperf_runner.spec.seeds import search_bounds, seed_for_preset

    seed_graph = seed_for_preset(preset.name, int(dataset["classes"]), int(dataset["image_size"]))
    bound = search_bounds(preset, seed_graph) if arch_cls is RandomMorphismSearch else {}
    if not history:
        return (arch_cls(seed_graph, rng_seed=seed, **bound),
                HparamSearch(preset.name, seed=seed, **hparam_kwargs))
    return (arch_cls.from_history(seed_graph, history, rng_seed=seed, **bound),
            HparamSearch.from_history(history, preset=preset.name, seed=seed, **hparam_kwargs))



def random_search_factory(preset: Any, dataset: Mapping[str, Any], seed: int,
                          history: list[dict[str, Any]] | None = None) -> tuple[Any, Any]:
    """`Controller.create(search_factory=...)`: random morphisms, the normal TPE policy."""
    return _searches(preset, dataset, seed, history, RandomMorphismSearch)


def seed_only_factory(preset: Any, dataset: Mapping[str, Any], seed: int,
                      history: list[dict[str, Any]] | None = None) -> tuple[Any, Any]:
    """`Controller.create(search_factory=...)`: the seed architecture only, TPE from the first round
    (trials without a parent ask TPE; its first points are random, as in every TPE)."""
    return _searches(preset, dataset, seed, history, SeedOnlySearch, tpe_from_round=0)


__all__ = ["RandomMorphismSearch", "SeedOnlySearch", "random_search_factory", "seed_only_factory"]
