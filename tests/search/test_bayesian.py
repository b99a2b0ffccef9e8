"""Bayesian optimisation over architectures: no duplicates, no frozen GP, results paired by hash."""

from __future__ import annotations

import math
import random
import threading

import numpy as np
import pytest
from aiperf_runner.search.bayesian import ArchitectureSearch, GaussianProcess
from aiperf_runner.search.morphism import random_morphism


def _fake_accuracy(graph, rng):
    return 0.7 + 0.2 * math.tanh((len(graph.layers) - 30) / 20) + rng.gauss(0, 0.01)


def test_first_proposal_is_the_seed_then_children(seed_graph):
    s = ArchitectureSearch(seed_graph, rng_seed=0)
    first = s.propose()
    assert first.arch_hash == seed_graph.hash() and first.parent_hash is None and first.morphisms == []
    second = s.propose()  # before any result: a child of the seed
    assert second.parent_hash == first.arch_hash and second.morphisms
    assert set(second.morphisms) <= {"deeper", "wider", "skip"}
    assert second.arch_hash == second.graph.hash() != first.arch_hash


def test_fifty_proposals_without_duplicates(seed_graph):
    rng = random.Random(0)
    # a lighter annealing than the default (4 x 4 instead of 12 x 8 candidates) keeps the test fast
    s = ArchitectureSearch(seed_graph, rng_seed=1, n_neighbours=4, max_expansions=4)
    seen = set()
    ops = set()
    for _ in range(50):
        p = s.propose()
        assert p is not None
        p.graph.validate()
        assert p.arch_hash == p.graph.hash()
        assert p.arch_hash not in seen
        assert p.parent_hash is None or p.parent_hash in seen
        seen.add(p.arch_hash)
        ops.update(p.morphisms)
        s.observe(p.arch_hash, _fake_accuracy(p.graph, rng))
    assert s.known_hashes == frozenset(seen)
    assert ops == {"deeper", "wider", "skip"}


def test_identical_seed_observations_do_not_freeze_the_model(seed_graph):
    """The original's defect: several slots train the same seed, the kernel matrix gets identical
    rows, Cholesky fails and the GP silently stops learning."""
    s = ArchitectureSearch(seed_graph, rng_seed=2)
    seed = s.propose()
    for acc in (0.5, 0.5, 0.5, 0.52, 0.48):
        s.observe(seed.arch_hash, acc)
    hashes = []
    for i in range(8):
        p = s.propose()
        assert p is not None
        hashes.append(p.arch_hash)
        s.observe(p.arch_hash, 0.6 + 0.01 * i)
        s.observe(p.arch_hash, 0.6 + 0.01 * i)  # repeated results of one architecture, again
    mean, std = s.predict([seed_graph])
    assert np.isfinite(mean).all() and np.isfinite(std).all()
    assert abs(mean[0] - 0.5) < 0.05  # the seed's aggregated value, not a frozen prior
    assert len(set(hashes)) == 8
    assert s.gp.n == 9  # one point per architecture


def test_the_training_points_embed_as_the_candidates_do():
    """The fit embeds its points by gathering each subset's rows (the matrix is symmetric), a
    prediction by gathering columns: one embedding, the same values either way."""
    rng = np.random.default_rng(0)
    a = rng.random((300, 300)).astype(np.float32)
    dist = np.minimum(a, a.T)
    np.fill_diagonal(dist, 0.0)
    gp = GaussianProcess()
    gp._draw_subsets(300)
    assert np.array_equal(gp._embed_training(dist), gp._embed(dist))
    assert np.array_equal(gp._embed_training(dist, 250), gp._embed(dist[250:]))


def test_gp_survives_duplicate_and_zero_distance_points():
    dist = np.zeros((6, 6), dtype=np.float32)  # six architectures the distance cannot tell apart
    gp = GaussianProcess()
    gp.fit(dist, np.array([0.1, 0.2, 0.3, 0.3, 0.3, 0.3]))
    mean, std = gp.predict(np.zeros((2, 6), dtype=np.float32))
    assert np.isfinite(mean).all() and np.isfinite(std).all()
    gp.fit(dist[:3, :3], np.array([0.5, 0.5, 0.5]))  # no variance at all
    mean, std = gp.predict(np.ones((1, 3), dtype=np.float32))
    assert np.isfinite(mean).all() and np.isfinite(std).all()


def test_results_are_paired_by_hash_not_by_position(seed_graph):
    rng = random.Random(4)
    s = ArchitectureSearch(seed_graph, rng_seed=3)
    a = s.propose()
    b = s.propose()
    c = s.propose()
    # results arrive in another order than the proposals
    s.observe(c.arch_hash, 0.30)
    s.observe(a.arch_hash, 0.90)
    s.observe(b.arch_hash, 0.60)
    mean, _ = s.predict([a.graph, b.graph, c.graph])
    assert mean[0] > mean[1] > mean[2]
    assert s.best() == (a.arch_hash, 0.90)
    # an unknown architecture cannot be observed without its graph
    other, _ = random_morphism(c.graph, rng)
    with pytest.raises(KeyError):
        s.observe(other.hash(), 0.5)
    s.observe(other.hash(), 0.5, graph=other)
    assert other.hash() in s.known_hashes
    with pytest.raises(ValueError):
        s.observe(a.arch_hash, float("nan"))


def test_rebuild_from_history_never_reproposes(seed_graph):
    rng = random.Random(5)
    first = ArchitectureSearch(seed_graph, rng_seed=0, n_neighbours=4, max_expansions=4)
    history = []
    for _ in range(12):
        p = first.propose()
        acc = _fake_accuracy(p.graph, rng)
        history.append({"graph": p.graph.to_json(), "arch_hash": p.arch_hash, "parent_hash": p.parent_hash,
                        "morphisms": p.morphisms, "accuracy": acc if len(history) < 10 else None})
    again = ArchitectureSearch.from_history(seed_graph, history, rng_seed=0, n_neighbours=4, max_expansions=4)
    assert again.known_hashes == frozenset(h["arch_hash"] for h in history)
    for _ in range(10):
        p = again.propose()
        assert p.arch_hash not in {h["arch_hash"] for h in history}
        assert p.parent_hash in again.known_hashes
    assert again.gp.n == 10


def test_limits_are_respected(seed_graph):
    s = ArchitectureSearch(seed_graph, rng_seed=6, max_layers=len(seed_graph.layers) + 3)
    s.propose()
    s.observe(seed_graph.hash(), 0.5)
    sizes = []
    for _ in range(6):
        p = s.propose()
        if p is None:
            break
        sizes.append(len(p.graph.layers))
        s.observe(p.arch_hash, 0.5)
    assert sizes and max(sizes) <= len(seed_graph.layers) + 3


def test_propose_in_a_thread_while_observing(seed_graph):
    s = ArchitectureSearch(seed_graph, rng_seed=7, n_neighbours=4, max_expansions=4)
    proposals = []
    errors = []

    def worker():
        try:
            for _ in range(10):
                proposals.append(s.propose())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    done = 0
    while t.is_alive() or done < len(proposals):
        if done < len(proposals):
            s.observe(proposals[done].arch_hash, 0.5 + 0.01 * done)
            done += 1
    t.join()
    assert not errors
    assert len({p.arch_hash for p in proposals}) == 10


def test_a_batch_is_distinct_new_architectures_best_first(seed_graph):
    s = ArchitectureSearch(seed_graph, rng_seed=2, n_neighbours=4, max_expansions=4)
    first = s.propose_batch(6)  # the seed, then its children from the same pass
    assert first[0].arch_hash == seed_graph.hash() and 1 < len(first) <= 6
    rng = random.Random(0)
    for p in first:
        s.observe(p.arch_hash, _fake_accuracy(p.graph, rng))
    batch = s.propose_batch(8)
    assert 1 < len(batch) <= 8
    hashes = [p.arch_hash for p in first + batch]
    assert len(set(hashes)) == len(hashes) and all(p.arch_hash == p.graph.hash() for p in batch)
    acquisitions = [p.acquisition for p in batch]
    assert acquisitions == sorted(acquisitions, reverse=True)
    assert all(s.propose().arch_hash not in hashes for _ in range(3))  # never proposed again


def test_the_gp_history_is_bounded_keeping_the_best_and_the_latest(seed_graph):
    s = ArchitectureSearch(seed_graph, rng_seed=3, n_neighbours=4, max_expansions=4, max_history=10)
    rng = random.Random(0)
    accuracies = {}
    for _ in range(6):
        for p in s.propose_batch(5):
            accuracies[p.arch_hash] = _fake_accuracy(p.graph, rng)
            s.observe(p.arch_hash, accuracies[p.arch_hash])
    s.propose()  # drains and refits
    held = s._obs_hashes
    assert len(accuracies) > 20 and len(held) == 10 and len(set(held)) == 10
    best5 = sorted(accuracies, key=accuracies.get, reverse=True)[:5]
    assert set(best5) <= set(held)
    latest = list(accuracies)[-3:]
    assert set(latest) <= set(held)
    # the distance matrix is the one a fresh computation gives for the rows held, in their order
    fresh = np.array([[0.0 if a == b else s._bank.distances([s._descriptor(b)], s.skip_weight)[0][s._obs_index[a]]
                       for a in held] for b in held])
    assert np.allclose(s._dist[:10, :10], fresh, atol=1e-4)
    assert s.gp.n == 10 and s.best()[0] == best5[0]  # every result still counts for the best
