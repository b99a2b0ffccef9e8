"""Bayesian optimisation over architectures: the AIPerf/NNI method, with its defects fixed and fast.

- **Model**: a Gaussian process (gp.py) over the architectures observed so far. Distance d: the edit
  distance of `editdistance.py` (layer sequence of the main chain + skip connections, as NNI's
  `edit_distance`); kernel exp(-d^2)-style on a Bourgain embedding of d (as NNI trains, but used
  for prediction too, so the kernel is one positive semi-definite function). Targets are
  standardised; observation noise sits on the diagonal.
- **Acquisition**: UCB, mean + 2.576 x standard deviation (NNI's beta).
- **Optimiser**: NNI's simulated annealing (search/annealing.py, shared with the LLM search) — a
  priority queue seeded with the observed architectures (by accuracy); pop the best, accept it with
  probability exp(min((value - best_acq) / T, 1)), expand an accepted element into `n_neighbours`
  random morphisms (deeper / wider / skip), push those with their acquisition value; T *= 0.9 down
  to 1e-4 — bounded here by `max_expansions` expansions and `max_pops` pops, so a proposal costs a
  known number of acquisition evaluations, and by `max_chain` morphisms between an observed
  architecture and a proposal (NNI's chains are unbounded, which grows networks by many layers at
  once).

Fixes over the original:

- (a) *Identical seed architectures froze the GP* (repeated rows made the kernel matrix singular;
  NNI's incremental Cholesky then failed and the model silently stopped updating). Here
  observations are keyed by architecture hash and aggregated per architecture (mean, with the
  noise variance divided by the number of observations), and the Cholesky factorisation escalates
  a diagonal jitter until it succeeds, so the model always refits.
- (b) *Accuracies paired with the wrong architecture* (results matched by list position). Here
  `observe(arch_hash, accuracy)` names the architecture; nothing is matched by position.

Also: an architecture hash already proposed (or registered) is never proposed again, and the
annealing keeps only new children within the bounds (`max_layers`, `max_train_flops`), so that a
pass's candidates are all proposable; an observed architecture none of whose sampled children is
new and within the bounds is not expanded again, and when annealing finds too few, random chains
from the architectures not yet spent make up the batch (at the bounds, the best architectures have
no children left: the new ones lie below them). Distances are
cached incrementally (one vectorised row per newly observed architecture) and candidate distances
are computed for a whole batch at once with numpy, so a proposal takes well under a second at
1,000 results on two cores (see bench/search_latency.py).

The search's linear algebra runs on one BLAS thread (blas.py): it shares the cores with training.

Thread safety: `observe` and `register` only append to an inbox under a short lock, `propose`
holds the search lock and drains the inbox first; the controller may run `propose` in a background
thread while calling `observe` from its main loop. A proposal depends only on the sequence of
calls, not on their timing.

Resume: re-feed the run's history — `register(graph, parent_hash, morphisms)` for every proposed
architecture and `observe(hash, accuracy)` for every result — or use `ArchitectureSearch.from_history`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aiperf_runner.search import morphism
from aiperf_runner.search.annealing import AnnealingSearch
from aiperf_runner.search.blas import blas_single_thread
from aiperf_runner.search.editdistance import Descriptor, DescriptorBank, describe
from aiperf_runner.search.gp import GaussianProcess
from aiperf_runner.search.protocols import ArchitectureSearcher
from aiperf_runner.spec.graph import Graph
from aiperf_runner.spec.seeds import within_bounds

BETA = 2.576
# The GP is fitted on at most this many architectures (the better half by accuracy and the most
# recent): a fit costs O(n^3) and the distance matrix O(n^2), and thousands of slots bring hundreds
# of results a minute. 1,000 points fit in tens of milliseconds on one core.
MAX_HISTORY = 1000


@dataclass
class Proposal:
    graph: Graph
    parent_hash: str | None
    morphisms: list[str]
    arch_hash: str
    details: list[dict[str, Any]] = field(default_factory=list)
    acquisition: float | None = None


@dataclass
class _Arch:
    graph: Graph
    parent_hash: str | None
    morphisms: list[str]
    descriptor: Descriptor | None = None


class ArchitectureSearch(AnnealingSearch[Graph, dict[str, Any], Proposal]):
    """Proposes architectures: the seed first, then morphed children chosen by GP-UCB + annealing.
    A step of a chain is a morphism's details (morphism.random_morphism), "op" naming it."""

    def __init__(self, seed_graph: Graph, rng_seed: int = 0, max_layers: int | None = None,
                 max_params: int | None = None, max_filters: int | None = None, max_train_flops: int | None = None,
                 beta: float = BETA,
                 n_neighbours: int = 8, max_expansions: int = 12, max_pops: int = 48, max_chain: int = 2,
                 t_min: float = 1e-4, anneal: float = 0.9, noise: float = 1e-2, skip_weight: float = 1.0,
                 length_scale: float | None = None, max_history: int | None = MAX_HISTORY) -> None:
        seed_graph.validate()
        self.seed_graph = seed_graph.copy()
        self.seed_hash = seed_graph.hash()
        self.rng_seed = rng_seed
        self.max_layers = max_layers
        self.max_params = max_params
        self.max_train_flops = max_train_flops  # v2 train FLOPs per image (spec/flops.py) of a proposal
        self.max_filters = max_filters
        self.beta = beta
        self.n_neighbours = n_neighbours
        self.max_expansions = max_expansions
        self.max_pops = max_pops
        self.max_chain = max_chain
        self.t_min = t_min
        self.anneal = anneal
        self.skip_weight = skip_weight
        self.max_history = max_history
        self.gp = GaussianProcess(noise=noise, length_scale=length_scale)
        self._rng = random.Random(rng_seed)
        self._init_feeding()
        self._archs: dict[str, _Arch] = {}          # every proposed or registered architecture
        self._obs: dict[str, list[float]] = {}      # arch hash -> accuracies observed
        self._obs_index: dict[str, int] = {}        # arch hash -> row in the distance matrix
        self._obs_hashes: list[str] = []          # the architectures the GP is fitted on (row order)
        # Per row, as arrays (so that choosing a row to replace costs one numpy pass, not a Python
        # loop over the rows): the sum and count of its architecture's results, and when the row
        # got its architecture (the observation count then).
        self._row_sum = np.zeros(16)
        self._row_count = np.zeros(16)
        self._row_added = np.zeros(16)
        self._rows_replaced = False                 # since the last fit: the next one is not incremental
        self._bank = DescriptorBank()
        self._dist = np.zeros((0, 0), dtype=np.float32)
        self._fitted_at = -1                        # number of observations at the last fit
        self._n_obs_total = 0
        # Observed architectures none of whose sampled morphisms stayed within the bounds: no
        # longer expanded. Once a bounded run's best architectures reach the bound, expanding them
        # first (the annealing pops by accuracy) used every expansion of a pass on children the
        # bounds refuse, and batches shrank to the fallback's one proposal (4 a second, against the
        # 28 that 4,096 slots of 60-s trials ask for).
        self._saturated: set[str] = set()

    # ---- feeding ------------------------------------------------------------------------------
    def register(self, graph: Graph, parent_hash: str | None = None, morphisms: Sequence[str] = (),
                 arch_hash: str | None = None) -> str:
        """Record an architecture proposed earlier (resume) so that it is never proposed again."""
        h = arch_hash or graph.hash()
        self._enqueue_register(h, (h, graph, parent_hash, list(morphisms)))
        return h

    def observe(self, arch_hash: str, accuracy: float, graph: Graph | None = None) -> None:
        """The accuracy a trial of architecture `arch_hash` reached. Repeated observations of one
        architecture are aggregated, never treated as separate points."""
        self._enqueue_result(arch_hash, accuracy, graph, result_name="accuracy", arch_name="graph")

    @classmethod
    def from_history(cls, seed_graph: Graph, history: Iterable[Mapping[str, Any]], **kwargs: Any) -> ArchitectureSearch:
        """Rebuild from records in proposal order: {"graph": Graph | json, "parent_hash", "morphisms",
        "accuracy" (optional; None or absent when the trial did not finish), "arch_hash" (optional)}."""
        search = cls(seed_graph, **kwargs)
        count = search._replay(history, _as_graph, arch_key="graph", steps_key="morphisms", result_key="accuracy")
        # do not replay the random stream of the run before the kill
        search._rng = random.Random(f"{search.rng_seed}:{count}")
        return search

    def _drain(self) -> None:
        items = self._take_inbox()
        dirty: dict[int, None] = {}  # rows that got a new architecture, in order
        for kind, payload in items:
            if kind == "register":
                h, graph, parent, ops = payload
                if h not in self._archs:
                    self._archs[h] = _Arch(graph.copy(), parent, ops)
                    self._order.append(h)
            else:
                h, acc = payload
                row = self._add_observation(h, acc)
                if row is not None:
                    dirty[row] = None
        if dirty:
            self._fill_distances(list(dirty))

    def _descriptor(self, h: str) -> Descriptor:
        arch = self._archs[h]
        if arch.descriptor is None:
            arch.descriptor = describe(arch.graph)
        return arch.descriptor

    def _add_observation(self, h: str, acc: float) -> int | None:
        """Record one result; the row of the GP's points that got a new architecture (its
        distances are filled in afterwards, `_fill_distances`), None when none did."""
        self._n_obs_total += 1
        if h in self._obs:
            self._obs[h].append(acc)
            row = self._obs_index.get(h)
            if row is not None:
                self._row_sum[row] += acc
                self._row_count[row] += 1
            return None
        self._obs[h] = [acc]
        if self.max_history is not None and len(self._obs_hashes) >= self.max_history:
            row = self._victim()
            del self._obs_index[self._obs_hashes[row]]
            self._obs_hashes[row] = h
            self._bank.put(row, self._descriptor(h))
            self._rows_replaced = True
        else:
            row = len(self._obs_hashes)
            if row >= len(self._row_sum):
                for name in ("_row_sum", "_row_count", "_row_added"):
                    old = getattr(self, name)
                    setattr(self, name, np.concatenate([old, np.zeros_like(old)]))
            self._obs_hashes.append(h)
            self._bank.add(self._descriptor(h))
        self._obs_index[h] = row
        self._row_sum[row], self._row_count[row], self._row_added[row] = acc, 1, self._n_obs_total
        return row

    def _fill_distances(self, rows: list[int]) -> None:
        """The distance matrix's rows and columns of `rows` (architectures just added or replaced),
        from one vectorised edit-distance pass over all of them against every row."""
        n = len(self._obs_hashes)
        if n > len(self._dist):
            cap = max(16, len(self._dist))
            while cap < n:
                cap *= 2
            grown = np.zeros((cap, cap), dtype=np.float32)
            grown[:len(self._dist), :len(self._dist)] = self._dist
            self._dist = grown
        index = np.array(rows)
        block = self._bank.distances([self._descriptor(self._obs_hashes[i]) for i in rows], self.skip_weight)
        among = block[:, index]
        block[:, index] = np.minimum(among, among.T)  # one value for each pair, as the matrix is symmetric
        block[np.arange(len(rows)), index] = 0.0
        self._dist[index, :n] = block
        self._dist[:n, index] = block.T

    def _victim(self) -> int:
        """The row a new architecture takes once the GP holds `max_history`: the oldest of those
        outside the better half by mean accuracy (the best stay, the rest is a recent window)."""
        n = len(self._obs_hashes)
        means = self._row_sum[:n] / self._row_count[:n]
        keep = n // 2
        added = self._row_added[:n].copy()
        if keep:
            added[np.argpartition(-means, keep - 1)[:keep]] = np.inf
        return int(np.argmin(added))

    # ---- model --------------------------------------------------------------------------------
    def _refit(self) -> None:
        if self._fitted_at == self._n_obs_total:
            return
        n = len(self._obs_hashes)
        counts = self._row_count[:n].copy()
        y = self._row_sum[:n] / counts
        self.gp.fit(self._dist[:n, :n], y, counts, incremental=not self._rows_replaced)
        self._fitted_at = self._n_obs_total
        self._rows_replaced = False

    def _acquisition(self, descs: Sequence[Descriptor]) -> np.ndarray:
        if not descs:
            return np.zeros(0)
        if not self._obs_hashes:
            return np.zeros(len(descs))
        dist = self._bank.distances(descs, self.skip_weight)
        mean, std = self.gp.predict(dist)
        return mean + self.beta * std

    def predict(self, graphs: Sequence[Graph]) -> tuple[np.ndarray, np.ndarray]:
        """GP mean and standard deviation of accuracy for the given graphs (diagnostics, tests)."""
        with self._search_lock, blas_single_thread():
            self._drain()
            self._refit()
            if not self._obs_hashes:
                return np.zeros(len(graphs)), np.ones(len(graphs))
            return self.gp.predict(self._bank.distances([describe(g) for g in graphs], self.skip_weight))

    def best(self) -> tuple[str, float] | None:
        with self._search_lock:
            self._drain()
            if not self._obs:
                return None
            h = max(self._obs, key=lambda k: max(self._obs[k]))
            return h, max(self._obs[h])

    # ---- proposing ----------------------------------------------------------------------------
    def _allowed(self, graph: Graph) -> bool:
        if self.max_params is not None and morphism.param_count(graph) > self.max_params:
            return False
        return within_bounds(graph, self.max_train_flops, self.max_layers)

    def _neighbour(self, graph: Graph) -> tuple[Graph, dict[str, Any]] | None:
        try:
            return morphism.random_morphism(graph, self._rng, max_filters=self.max_filters, check=False)
        except morphism.MorphismError:
            return None

    def _hash(self, graph: Graph) -> str:
        return graph.hash()

    def _arch_of(self, arch_hash: str) -> Graph:
        return self._archs[arch_hash].graph

    def _check(self, graph: Graph) -> None:
        graph.validate()  # morphisms are valid by construction; checked once on each chosen one

    def _acquisition_of(self, graphs: Sequence[Graph]) -> np.ndarray:
        # Before the first result every acquisition is 0: no descriptor is needed.
        return self._acquisition([describe(g) for g in graphs]) if self._obs_hashes else np.zeros(len(graphs))

    def _accept(self, h: str, graph: Graph, parent: str | None, steps: tuple[dict[str, Any], ...],
                acq: float | None) -> Proposal:
        self._claim(h)
        ops = [d["op"] for d in steps]
        self._archs[h] = _Arch(graph, parent, ops)
        return Proposal(graph.copy(), parent, list(ops), h, list(steps), acq)

    def propose(self) -> Proposal | None:
        """The next architecture to train; None when no new architecture can be found."""
        batch = self.propose_batch(1)
        return batch[0] if batch else None

    def propose_batch(self, count: int) -> list[Proposal]:
        """Up to `count` new architectures from one model fit and one annealing pass: the distinct
        candidates of highest acquisition among those the pass visited (at most `max_expansions`
        x `n_neighbours`), best first. Without fantasised results a batch ignores what its own
        members will teach the model; at thousands of slots results arrive by the hundred per
        second anyway, and one pass per batch is what lets proposals keep up. Empty when no new
        architecture can be found."""
        with self._search_lock, blas_single_thread():
            self._drain()
            out: list[Proposal] = []
            if self.seed_hash not in self._archs and self.seed_hash not in self._known:
                out.append(self._accept(self.seed_hash, self.seed_graph.copy(), None, (), None))
                if count <= 1:
                    return out
            self._refit()
            out += self._anneal(count - len(out))
            if len(out) < count:  # annealing found too few new ones: random chains make up the batch
                out += self._random_fallback(count - len(out))
            return out

    def _roots(self) -> list[tuple[str, float]]:
        """The GP's architectures by mean accuracy (every one proposed, at 0, before the first result),
        less those whose neighbourhoods are spent."""
        if self._obs_hashes:
            means = (self._row_sum[:len(self._obs_hashes)] / self._row_count[:len(self._obs_hashes)]).tolist()
            return [(h, v) for h, v in zip(self._obs_hashes, means, strict=True) if h not in self._saturated]
        return [(h, 0.0) for h in self._order if h not in self._saturated]

    def _spent(self, root: str) -> None:
        # Every sampled morphism of an observed architecture is out of bounds or proposed before: its
        # neighbourhood is spent, and it is expanded no more.
        self._saturated.add(root)

    def _fallback_pool(self) -> list[str]:
        """The model's architectures whose neighbourhoods are not spent, else any architecture proposed
        so far whose neighbourhood is not (once a bounded search's best all sit at the bound, the new
        ones lie below it), else any."""
        return ([h for h in self._obs_hashes if h not in self._saturated]
                or [h for h in self._order if h not in self._saturated] or self._obs_hashes or self._order)

    def _chain_length(self, attempt: int) -> int:
        return 1 + min(attempt // 20, 9)  # chains grow longer as attempts fail


def _as_graph(graph: Graph | Mapping[str, Any]) -> Graph:
    """A history record's graph: a Graph, or its JSON."""
    return graph if isinstance(graph, Graph) else Graph.from_json(graph)


# Checked by mypy: the search is what the controller drives (search/protocols.py).
_PROTOCOL_CHECK: type[ArchitectureSearcher] = ArchitectureSearch

__all__ = ["BETA", "ArchitectureSearch", "GaussianProcess", "Proposal"]
