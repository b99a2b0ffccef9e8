"""The baseline searches of bench/search_quality.py: random morphisms, seed only."""

from __future__ import annotations

from types import SimpleNamespace

from aiperf_runner.search.baselines import (
    RandomMorphismSearch,
    SeedOnlySearch,
    random_search_factory,
    seed_only_factory,
)
from aiperf_runner.search.morphism import OPS
from aiperf_runner.spec.seeds import seed_for_preset

SEED = seed_for_preset("fashion-mnist", 10, 28)
DATASET = {"classes": 10, "image_size": 28}
PRESET = SimpleNamespace(name="fashion-mnist")


def test_random_search_starts_from_the_seed_then_never_repeats() -> None:
    search = RandomMorphismSearch(SEED, rng_seed=3)
    first = search.propose()
    assert first is not None and first.arch_hash == SEED.hash() and first.parent_hash is None
    seen = {first.arch_hash}
    ops: set[str] = set()
    for i in range(30):
        p = search.propose()
        assert p is not None and p.arch_hash not in seen
        assert 1 <= len(p.morphisms) <= 2 and p.parent_hash in seen
        assert p.graph.hash() == p.arch_hash and p.graph.input_shape == (1, 28, 28)
        seen.add(p.arch_hash)
        ops.update(p.morphisms)
        search.observe(p.arch_hash, 0.8 + i / 1000)
    assert ops == set(OPS)


def test_random_search_draws_parents_among_trained_architectures() -> None:
    search = RandomMorphismSearch(SEED, rng_seed=0)
    seed = search.propose()
    children = [search.propose() for _ in range(3)]  # nothing trained yet: parents among the proposed
    assert seed is not None and all(c is not None for c in children)
    search.observe(seed.arch_hash, 0.85)
    parents = {p.parent_hash for p in (search.propose() for _ in range(10)) if p is not None}
    assert parents == {seed.arch_hash}


def test_random_search_resumes_without_proposing_the_past_again() -> None:
    search = RandomMorphismSearch(SEED, rng_seed=1)
    history = []
    for i in range(5):
        p = search.propose()
        assert p is not None
        history.append({"graph": p.graph.to_json(), "arch_hash": p.arch_hash, "parent_hash": p.parent_hash,
                        "morphisms": p.morphisms, "accuracy": [0.8, 0.81, 0.82, 0.83, None][i]})
    resumed = RandomMorphismSearch.from_history(SEED, history, rng_seed=1)
    done = {h["arch_hash"] for h in history}
    for _ in range(10):
        p = resumed.propose()
        assert p is not None and p.arch_hash not in done
    assert resumed.best() == (history[3]["arch_hash"], 0.83)


def test_seed_only_search_proposes_the_seed_every_time() -> None:
    search = SeedOnlySearch(SEED)
    for _ in range(4):
        p = search.propose()
        assert p is not None and p.arch_hash == SEED.hash() and p.morphisms == [] and p.parent_hash is None
        search.observe(p.arch_hash, 0.9)
    assert search.best() == (SEED.hash(), 0.9)


def test_factories_pair_the_searches_with_tpe() -> None:
    arch, hp = seed_only_factory(PRESET, DATASET, 0)
    assert isinstance(arch, SeedOnlySearch)
    # seed only: TPE from the first trial, as there is no parent to inherit from
    assert [hp.suggest(f"t{i:04d}", None, i // 2)[1] for i in range(4)] == ["tpe"] * 4
    arch, hp = random_search_factory(PRESET, DATASET, 0)
    assert isinstance(arch, RandomMorphismSearch)
    assert hp.suggest("t0000", None, 0)[1] == "seed"  # the normal policy: seed point, then inherit
    resumed, _ = random_search_factory(PRESET, DATASET, 0, [
        {"trial": "t0000", "graph": SEED.to_json(), "arch_hash": SEED.hash(), "parent_hash": None, "parent": None,
         "morphisms": [], "hparams": hp.hparams("t0000"), "hparam_source": "seed", "round": 0, "accuracy": 0.8}])
    assert resumed.best() == (SEED.hash(), 0.8)
