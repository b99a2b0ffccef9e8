"""Baseline searches of AIPerf-LLM to measure the architecture search against (bench/search_quality.py
--workload llm): the LLM counterparts of search/baselines.py.

Both are `LlmArchitectureSearch` with another `propose`: the constructor and its bounds, `register`,
`observe`, `best` and `from_history` are the search's own, so a run with either (`LlmRun.create(...,
search_factory=...)`) differs from a normal run only in how architectures are chosen:

- `LlmRandomGrowthSearch`: the seed first, then a parent drawn uniformly from the architectures with a
  result (before any result: from those proposed), grown by 1 to `max_chain` random growths drawn as
  the search as built draws them (`LlmArchitectureSearch.random_growth`: the kinds of spec/llmgrowth.py
  GROWTH_KINDS, the same sizes and bounds); no model, no annealing; an architecture already proposed is
  never proposed again.
- `LlmSeedOnlySearch`: the preset's seed architecture for every trial, each trained from scratch (no
  parent, no growth), so only the hyper-parameters change (`llm_seed_only_factory` pairs it with a TPE
  that asks from the first trial on, as `baselines.seed_only_factory` does for images).

The factories take (preset, seed) and return (architecture search, hyper-parameter search).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from aiperf_runner.search.llmhparams import LlmHparamSearch
from aiperf_runner.search.llmsearch import Growth, LlmArchitectureSearch, LlmProposal
from aiperf_runner.spec.llmflops import LlmArch
from aiperf_runner.spec.llmrules import LlmPreset

LlmSearches = tuple[LlmArchitectureSearch, LlmHparamSearch]


class LlmRandomGrowthSearch(LlmArchitectureSearch):
    """Random search over the growths of the search as built: a random parent, a random chain."""

    def propose(self) -> LlmProposal | None:
        """The seed, then 1-`max_chain` random growths of a random observed architecture; None when no
        new architecture within the bounds was found in the fallback's attempts."""
        with self._search_lock:
            self._drain()
            if self.seed_hash not in self._archs:
                return self._accept(self.seed_hash, self.seed_arch, None, (), None)
            # Seeded from the state, as the search as built: from_history continues the same stream.
            self._rng = random.Random(f"{self.rng_seed}:{len(self._order)}")
            found = self._random_fallback(1)
            return found[0] if found else None

    def _chain_length(self, attempt: int) -> int:
        # Drawn, not cycled by attempt as the search's fallback does: a first try of 1 growth every time
        # would make the baseline mostly single growths.
        return self._rng.randint(1, self.max_chain)

    def _acquisition_of(self, archs: Sequence[LlmArch]) -> np.ndarray:
        return np.zeros(len(archs))  # no model: every candidate is alike (and no GP is fitted)

    def _accept(self, h: str, arch: LlmArch, parent: str | None, growths: tuple[Growth, ...],
                acq: float | None) -> LlmProposal:
        return super()._accept(h, arch, parent, growths, None)  # no acquisition value to report


class LlmSeedOnlySearch(LlmArchitectureSearch):
    """The seed architecture, every time, from scratch: a search over hyper-parameters only."""

    def propose(self) -> LlmProposal:
        with self._search_lock:
            self._drain()
            if self.seed_hash not in self._archs:
                return self._accept(self.seed_hash, self.seed_arch, None, (), None)
            self.proposals += 1
            # No parent: the run trains it from random weights; with one it would start from the parent's
            # trained weights and keep training the same model, which is not this baseline.
            return LlmProposal(self.seed_arch, self.seed_hash, None)


def _searches(preset: LlmPreset, seed: int, arch_cls: type[LlmArchitectureSearch],
              **hparam_kwargs: Any) -> LlmSearches:
    """The two searches with the bounds and seeds a normal run gives them (run/llmrun.py)."""
    search = arch_cls(preset.seed_arch, rng_seed=seed, max_layers=preset.max_layers,
                      max_mlp_hidden=preset.max_mlp_hidden, max_heads_per_layer=preset.max_heads_per_layer)
    return search, LlmHparamSearch(seed=seed, batch_tokens=preset.batch_tokens, **hparam_kwargs)


def llm_random_factory(preset: LlmPreset, seed: int) -> LlmSearches:
    """`LlmRun.create(search_factory=...)`: random growths, the normal TPE policy."""
    return _searches(preset, seed, LlmRandomGrowthSearch)


def llm_seed_only_factory(preset: LlmPreset, seed: int) -> LlmSearches:
    """`LlmRun.create(search_factory=...)`: the seed architecture only, TPE from the first round (trials
    without a parent ask TPE; its first points are random, as in every TPE)."""
    return _searches(preset, seed, LlmSeedOnlySearch, tpe_from_round=0)


__all__ = ["LlmRandomGrowthSearch", "LlmSearches", "LlmSeedOnlySearch", "llm_random_factory",
           "llm_seed_only_factory"]
