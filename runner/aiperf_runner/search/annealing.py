"""What the two architecture searches share: bayesian.py's ArchitectureSearch (graphs, accuracy) and
llmsearch.py's LlmArchitectureSearch (transformer shapes, validation loss).

- **Feeding**: `register` and `observe` only append to an inbox under a short lock (the subclass drains
  it under the search lock when it proposes), and the set of known hashes (proposed or registered) is
  kept under that lock too, so the controller may propose on one thread while it feeds from another.
  The locks are left out of a pickle and made anew on unpickling.
- **Annealing**: NNI's simulated annealing, bounded — a priority queue seeded with the roots (observed
  architectures by value); pop the best, accept it with probability exp(min((value - best_acq) / T, 1)),
  expand an accepted element into `n_neighbours` random steps, push the new children with their
  acquisition value; T *= `anneal` down to `t_min`, at most `max_expansions` expansions and `max_pops`
  pops (both per 16 candidates asked), at most `max_chain` steps from a root. When it finds too few,
  random chains from the roots make up the rest.

A subclass says what an architecture is and how it grows: `_neighbour` (one random step), `_allowed`
(the bounds), `_hash`, `_arch_of`; how candidates score (`_acquisition_of`); where annealing and the
fallback start (`_roots`, `_fallback_pool`, `_chain_length`); and how an accepted one is recorded and
handed out (`_accept`, which calls `_claim`). The random stream is the subclass's `_rng`: every draw
here is made in the order the searches have always made it, so a proposal depends only on the calls.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

ArchT = TypeVar("ArchT")          # an architecture (a Graph, an LlmArch)
StepT = TypeVar("StepT")          # one step from a parent to a child (a morphism's details, a growth)
ProposalT = TypeVar("ProposalT")  # what `propose` hands out

# An annealing item: (-value, tie-break, counter, architecture, root hash, steps from the root, hash or
# None for a root). Roots come first between equals (their tie-break is below 0), children in the order
# they were made.
_Item = tuple[float, float, int, ArchT, str, tuple[StepT, ...], str | None]


class AnnealingSearch(Generic[ArchT, StepT, ProposalT]):
    """The inbox, the known hashes and the bounded annealing of an architecture search; see the module
    docstring. The subclass's constructor sets the parameters below and calls `_init_feeding`."""

    n_neighbours: int
    max_expansions: int
    max_pops: int
    max_chain: int
    t_min: float
    anneal: float
    _rng: random.Random

    def _init_feeding(self) -> None:
        self._order: list[str] = []                 # every proposed or registered hash, in that order
        self._inbox: list[tuple[str, Any]] = []
        self._inbox_lock = threading.Lock()
        self._search_lock = threading.RLock()
        self._known: set[str] = set()
        self.proposals = 0

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the locks: a search pickles, to run in a process of its own (search/buffer.py)."""
        state = self.__dict__.copy()
        del state["_inbox_lock"], state["_search_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._inbox_lock = threading.Lock()
        self._search_lock = threading.RLock()

    # ---- the subclass's -------------------------------------------------------------------------
    def register(self, arch: ArchT, parent_hash: str | None = None, steps: Any = (),
                 arch_hash: str | None = None) -> str:
        """Record an architecture proposed earlier (resume) so that it is never proposed again; `steps`
        lead to it from its parent (the subclass names and types them)."""
        raise NotImplementedError

    def _neighbour(self, arch: ArchT) -> tuple[ArchT, StepT] | None:
        """One random step from `arch` (child, step); None when the step drawn does not apply."""
        raise NotImplementedError

    def _allowed(self, arch: ArchT) -> bool:
        raise NotImplementedError

    def _hash(self, arch: ArchT) -> str:
        raise NotImplementedError

    def _arch_of(self, arch_hash: str) -> ArchT:
        raise NotImplementedError

    def _acquisition_of(self, archs: Sequence[ArchT]) -> np.ndarray:
        """The acquisition value of each architecture."""
        raise NotImplementedError

    def _roots(self) -> list[tuple[str, float]]:
        """(hash, value) of the architectures annealing starts from."""
        raise NotImplementedError

    def _fallback_pool(self) -> list[str]:
        """The hashes random chains start from when annealing finds too few."""
        raise NotImplementedError

    def _chain_length(self, attempt: int) -> int:
        """Steps in the fallback's chain of attempt number `attempt` (from 0)."""
        raise NotImplementedError

    def _accept(self, arch_hash: str, arch: ArchT, parent: str | None, steps: tuple[StepT, ...],
                acq: float | None) -> ProposalT:
        """Record `arch` as proposed (calling `_claim`) and make its proposal."""
        raise NotImplementedError

    def _spent(self, root: str) -> None:
        """Annealing found nothing new among the sampled children of observed root `root`."""

    def _check(self, arch: ArchT) -> None:
        """Checked once on each architecture about to be proposed (raises when it is malformed)."""

    # ---- feeding ------------------------------------------------------------------------------
    @property
    def known_hashes(self) -> frozenset[str]:
        with self._inbox_lock:
            return frozenset(self._known)

    def _enqueue_register(self, arch_hash: str, payload: tuple[Any, ...]) -> None:
        """Queue the registration of `arch_hash` (once: a known hash is passed over)."""
        with self._inbox_lock:
            if arch_hash not in self._known:
                self._known.add(arch_hash)
                self._inbox.append(("register", payload))

    def _enqueue_result(self, arch_hash: str, result: float, arch: ArchT | None, *, result_name: str,
                        arch_name: str) -> None:
        """Queue one result of `arch_hash`, registering it first (with `arch`) if it is unknown.
        `result_name` and `arch_name` are the caller's argument names, for its error messages."""
        value = float(result)
        if not math.isfinite(value):
            raise ValueError(f"{result_name} must be finite, got {result!r}")
        with self._inbox_lock:
            known = arch_hash in self._known
        if not known:
            if arch is None:
                raise KeyError(f"unknown architecture {arch_hash[:12]}: register() it or pass its {arch_name}")
            self.register(arch, arch_hash=arch_hash)
        with self._inbox_lock:
            self._inbox.append(("observe", (arch_hash, value)))

    def _replay(self, history: Iterable[Mapping[str, Any]], parse: Callable[[Any], ArchT], *, arch_key: str,
                steps_key: str, result_key: str) -> int:
        """Register every record of a run's history (in proposal order) and observe its result where it
        has one: `parse` makes the architecture of `record[arch_key]`. The number of records."""
        count = 0
        for rec in history:
            h = self.register(parse(rec[arch_key]), rec.get("parent_hash"), rec.get(steps_key) or (),
                              rec.get("arch_hash"))
            if rec.get(result_key) is not None:
                self._enqueue_result(h, rec[result_key], None, result_name=result_key, arch_name=arch_key)
            count += 1
        return count

    def _take_inbox(self) -> list[tuple[str, Any]]:
        """What was queued since the last call, in order: ("register", payload) and ("observe", (hash, value))."""
        with self._inbox_lock:
            items, self._inbox = self._inbox, []
        return items

    def _claim(self, arch_hash: str) -> int:
        """Mark `arch_hash` as proposed; its index in the proposal/registration order."""
        with self._inbox_lock:
            self._known.add(arch_hash)
        self._order.append(arch_hash)
        self.proposals += 1
        return len(self._order) - 1

    # ---- proposing ----------------------------------------------------------------------------
    def _anneal(self, count: int = 1) -> list[ProposalT]:
        """Up to `count` new architectures from one annealing pass: the distinct candidates of highest
        acquisition among those it visited, best first (between equals the earlier made)."""
        counter = itertools.count()
        heap: list[_Item[ArchT, StepT]] = []
        # Roots of equal value (all of them before the first result) in random order: in insertion
        # order the same first few would be expanded every time, and their neighbourhoods run dry.
        for h, value in self._roots():
            heapq.heappush(heap, (-value, -self._rng.random(), next(counter), self._arch_of(h), h, (), None))
        candidates: list[_Item[ArchT, StepT]] = []
        seen: set[str] = set()  # the candidates of this pass
        best_acq = -math.inf
        t = 1.0
        pops = expansions = 0
        # A batch explores in proportion to its size: `max_expansions` (and pops) per 16 candidates
        # (12 x 8 neighbours: six evaluated for each one proposed).
        scale = max(1, math.ceil(count / 16))
        max_pops, max_expansions = self.max_pops * scale, self.max_expansions * scale
        while heap and t > self.t_min and pops < max_pops and expansions < max_expansions:
            neg_value, _, _, arch, root, steps, _h = heapq.heappop(heap)
            pops += 1
            value = -neg_value
            exponent = min((value - best_acq) / t, 1.0) if best_acq > -math.inf else 1.0
            t *= self.anneal
            if len(steps) >= self.max_chain or math.exp(exponent) < self._rng.uniform(0, 1):
                continue
            children = self._new_children(arch, seen)
            if not children:
                if not steps:
                    self._spent(root)
                continue
            expansions += 1
            acq = self._acquisition_of([c for c, _, _ in children])
            for (child, step, child_hash), a in zip(children, acq, strict=True):
                item: _Item[ArchT, StepT] = (-float(a), 0.0, next(counter), child, root, (*steps, step), child_hash)
                heapq.heappush(heap, item)
                candidates.append(item)
                best_acq = max(best_acq, float(a))
        candidates.sort(key=lambda c: (c[0], c[2]))
        chosen: list[ProposalT] = []
        for neg_acq, _, _, arch, root, steps, arch_hash in candidates[:count]:
            assert arch_hash is not None  # candidates are children, hashed when made
            self._check(arch)
            chosen.append(self._accept(arch_hash, arch, root, steps, -neg_acq))
        return chosen

    def _new_children(self, arch: ArchT, seen: set[str]) -> list[tuple[ArchT, StepT, str]]:
        """`n_neighbours` random steps from `arch`, less those out of bounds and those proposed
        before (or already among this pass's candidates, `seen`, which it extends): (child, its
        step, its hash). At thousands of results most neighbours of the best architectures are
        known; left in, they crowded the new ones out of a pass's candidates."""
        out = []
        for _ in range(self.n_neighbours):
            made = self._neighbour(arch)
            if made is None or not self._allowed(made[0]):
                continue
            h = self._hash(made[0])
            with self._inbox_lock:  # not a copy of every hash proposed so far (tens of thousands)
                if h in self._known or h in seen:
                    continue
            seen.add(h)
            out.append((made[0], made[1], h))
        return out

    def _random_fallback(self, count: int = 1, attempts: int = 200) -> list[ProposalT]:
        """Up to `count` random chains (of `_chain_length` steps) from random architectures of the
        fallback pool, new and within the bounds, when annealing found too few new ones."""
        pool = self._fallback_pool()
        found: list[ProposalT] = []
        for attempt in range(max(attempts, 20 * count)):
            if len(found) >= count:
                break
            root = self._rng.choice(pool)
            arch = self._arch_of(root)
            steps: list[StepT] = []
            for _ in range(self._chain_length(attempt)):
                made = self._neighbour(arch)
                if made is None:
                    break
                arch, step = made
                steps.append(step)
            if not steps or not self._allowed(arch):
                continue
            h = self._hash(arch)
            with self._inbox_lock:
                if h in self._known:
                    continue
            self._check(arch)
            acq = float(self._acquisition_of([arch])[0])
            found.append(self._accept(h, arch, root, tuple(steps), acq))
        return found


__all__ = ["AnnealingSearch"]
