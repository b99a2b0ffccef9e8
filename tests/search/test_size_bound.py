"""The preset's bounds on a proposal's size (spec/presetfacts.py `max_flops_ratio`, `max_layers_ratio`): neither
the Bayesian search nor the random baseline proposes an architecture over them, however long the search
grows networks."""

from __future__ import annotations

import random

from aiperf_runner.data.presets import get_preset
from aiperf_runner.search.baselines import random_search_factory
from aiperf_runner.search.buffer import make_search
from aiperf_runner.spec.flops import flops_per_image


def _grow(factory, proposals: int = 60, layers: list[int] | None = None) -> tuple[int, list[int]]:
    preset = get_preset("smoke")
    search, _ = factory(preset, preset.dataset(None), 3)
    rng = random.Random(0)
    sizes: list[int] = []
    while len(sizes) < proposals:
        batch = search.propose_batch(4) if hasattr(search, "propose_batch") else [search.propose()]
        for p in batch:
            sizes.append(flops_per_image(p.graph, "v2").train)
            if layers is not None:
                layers.append(len(p.graph.layers))
            # bigger is better here: the search is pushed towards the bound
            search.observe(p.arch_hash, min(0.99, 0.5 + sizes[-1] / 4e7 + rng.random() * 0.01))
    return sizes[0], sizes


def test_the_bayesian_search_stays_under_the_bound() -> None:
    seed, sizes = _grow(make_search)
    assert get_preset("smoke").max_flops_ratio == 2.0
    assert max(sizes) <= 2.0 * seed
    assert max(sizes) > 1.6 * seed  # and it does grow towards it


def test_the_random_baseline_has_the_same_bound() -> None:
    seed, sizes = _grow(random_search_factory)
    assert max(sizes) <= 2.0 * seed


def test_every_preset_bounds_growth() -> None:
    for name in ("smoke", "fashion-mnist", "cifar", "imagenet"):
        assert (get_preset(name).max_flops_ratio or 0) >= 2


def test_both_searches_stay_under_the_layer_bound() -> None:
    assert get_preset("smoke").max_layers_ratio == 1.5
    for factory in (make_search, random_search_factory):
        layers: list[int] = []
        _grow(factory, proposals=80, layers=layers)
        assert max(layers) <= int(1.5 * layers[0]), (factory, max(layers), layers[0])
        assert max(layers) > layers[0]  # it grows, within the bound


def test_a_search_at_its_bounds_still_fills_its_batches() -> None:
    """Once the best architectures sit at the bounds (bigger is better here), the search proposes
    new ones below them: every batch full. It used to expand the best first, spend a pass on
    children the bounds refused or that were known, and shrink to one proposal a batch."""
    from aiperf_runner.search.bayesian import ArchitectureSearch
    from aiperf_runner.spec.seeds import seed_for_preset

    seed = seed_for_preset("smoke", 10, 16)
    seed_flops = flops_per_image(seed, "v2").train
    search = ArchitectureSearch(seed, rng_seed=0, max_layers=len(seed.layers) + 9, max_train_flops=2 * seed_flops)
    rng = random.Random(0)
    sizes, hashes = [], set()
    for _ in range(15):
        batch = search.propose_batch(16)
        sizes.append(len(batch))
        for p in batch:
            flops = flops_per_image(p.graph, "v2").train
            assert flops <= 2 * seed_flops and len(p.graph.layers) <= len(seed.layers) + 9
            hashes.add(p.arch_hash)
            search.observe(p.arch_hash, 0.5 + 0.1 * flops / seed_flops + rng.random() * 0.01)
    assert sizes == [16] * 15
    assert len(hashes) == 240  # all new
