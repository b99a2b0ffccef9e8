"""The AIPerf-LLM baseline searches of bench/search_quality.py --workload llm (search/llmbaselines.py): random
growths and the seed alone, their hyper-parameter policies, and LlmRun.create's hook that puts them in a run.
No training: proposals and observations only."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiperf_runner.run.llmrun import LlmRun, LlmRunConfig
from aiperf_runner.search.llmbaselines import (
    LlmRandomGrowthSearch,
    LlmSeedOnlySearch,
    llm_random_factory,
    llm_seed_only_factory,
)
from aiperf_runner.search.llmsearch import LlmArchitectureSearch, LlmProposal
from aiperf_runner.spec.llmgrowth import GROWTH_KINDS, llm_arch_hash, replay
from aiperf_runner.spec.llmrules import llm_preset

pytest.importorskip("optuna")  # the hyper-parameter search's

PRESET = llm_preset("llm-smoke")
SEED = PRESET.seed_arch
BOUNDS = {"max_layers": PRESET.max_layers, "max_mlp_hidden": PRESET.max_mlp_hidden,
          "max_heads_per_layer": PRESET.max_heads_per_layer}


def _fake_loss(p: LlmProposal) -> float:
    return 2.0 - 0.01 * len(p.arch.layers) + int(p.arch_hash[:4], 16) / 65536 * 0.1


def test_random_search_starts_from_the_seed_then_grows_new_architectures() -> None:
    search = LlmRandomGrowthSearch(SEED, rng_seed=3, **BOUNDS)
    first = search.propose()
    assert first is not None and first.arch == SEED and first.parent_hash is None and not first.growths
    archs = {first.arch_hash: first.arch}
    search.observe(first.arch_hash, 2.0)
    kinds: set[str] = set()
    chains: set[int] = set()
    for _ in range(30):
        p = search.propose()
        assert p is not None and p.arch_hash not in archs and p.acquisition is None
        assert p.parent_hash in archs and 1 <= len(p.growths) <= 2
        assert replay(archs[p.parent_hash], p.growths) == p.arch and llm_arch_hash(p.arch) == p.arch_hash
        assert search.allowed(p.arch)
        archs[p.arch_hash] = p.arch
        kinds.update(p.morphisms)
        chains.add(len(p.growths))
        search.observe(p.arch_hash, _fake_loss(p))
    assert kinds == set(GROWTH_KINDS) and chains == {1, 2}


def test_random_search_draws_parents_among_finished_architectures() -> None:
    search = LlmRandomGrowthSearch(SEED, rng_seed=0, **BOUNDS)
    seed = search.propose()
    children = [search.propose() for _ in range(3)]  # nothing finished yet: parents among the proposed
    assert seed is not None and all(c is not None for c in children)
    search.observe(seed.arch_hash, 2.0)
    parents = {p.parent_hash for p in (search.propose() for _ in range(10)) if p is not None}
    assert parents == {seed.arch_hash}


def test_random_search_resumes_with_the_proposal_the_live_search_would_make() -> None:
    live = LlmRandomGrowthSearch(SEED, rng_seed=1, **BOUNDS)
    history = []
    for i in range(5):
        p = live.propose()
        assert p is not None
        loss = _fake_loss(p) if i < 4 else None
        if loss is not None:
            live.observe(p.arch_hash, loss)
        history.append({"arch": p.arch.to_dict(), "arch_hash": p.arch_hash, "parent_hash": p.parent_hash,
                        "growths": list(p.growths), "loss": loss})
    resumed = LlmRandomGrowthSearch.from_history(SEED, history, rng_seed=1, **BOUNDS)
    nxt, again = live.propose(), resumed.propose()
    assert nxt is not None and again is not None and nxt.arch_hash == again.arch_hash
    assert again.arch_hash not in {h["arch_hash"] for h in history}


def test_seed_only_search_proposes_the_seed_from_scratch_every_time() -> None:
    search = LlmSeedOnlySearch(SEED, rng_seed=0, **BOUNDS)
    proposals = [search.propose() for _ in range(5)]
    assert all(p.arch == SEED and p.arch_hash == llm_arch_hash(SEED) for p in proposals)
    assert all(p.parent_hash is None and not p.growths for p in proposals)
    for loss in (2.0, 1.8, 1.9):  # repeats of one architecture: averaged, never refused
        search.observe(proposals[0].arch_hash, loss)
    assert search.best() == (llm_arch_hash(SEED), pytest.approx(1.9))
    assert search.proposals == 5


def test_factories_bound_the_searches_as_a_run_does_and_pick_the_hparam_policy() -> None:
    random_search, random_hp = llm_random_factory(PRESET, 7)
    seed_search, seed_hp = llm_seed_only_factory(PRESET, 7)
    assert isinstance(random_search, LlmRandomGrowthSearch) and isinstance(seed_search, LlmSeedOnlySearch)
    for search in (random_search, seed_search):
        assert search.rng_seed == 7 and search.max_layers == PRESET.max_layers
        assert search.max_mlp_hidden == PRESET.max_mlp_hidden
        assert search.max_heads_per_layer == PRESET.max_heads_per_layer
    # random: the normal policy (the seed point first); seed only: TPE from the first trial on
    assert random_hp.suggest("t0001", None, 0)[1] == "seed"
    hp, source = seed_hp.suggest("t0001", None, 0)
    assert source == "tpe" and hp["batch_tokens"] in PRESET.batch_tokens


@pytest.mark.parametrize(("factory", "cls"), [(None, LlmArchitectureSearch), (llm_seed_only_factory, LlmSeedOnlySearch),
                                              (llm_random_factory, LlmRandomGrowthSearch)])
def test_create_takes_the_searches_from_a_factory(tmp_path: Path, factory, cls) -> None:
    run = LlmRun.create(LlmRunConfig(seed=5, devices_per_slot=1), tmp_path / "run", say=lambda _: None,
                        search_factory=factory)
    try:
        assert type(run.search) is cls and run.search.rng_seed == 5
        assert run.search.max_layers == PRESET.max_layers
    finally:
        run.log.close()
        run.backend.shutdown()
