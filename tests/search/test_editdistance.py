"""The vectorised edit distance equals a plain dynamic programme; descriptors read the main chain."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from aiperf_runner.search.editdistance import DescriptorBank, describe, edit_distance
from aiperf_runner.search.morphism import deeper, random_morphism, skip, wider
from aiperf_runner.spec.seeds import resnet50, small_resnet


def _naive(a, b, sub):
    d = np.zeros((len(a) + 1, len(b) + 1))
    d[:, 0] = range(len(a) + 1)
    d[0, :] = range(len(b) + 1)
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i, j] = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + sub(a[i - 1], b[j - 1]))
    return d[-1, -1]


def _layer_sub(x, y):  # NNI's layer_distance / attribute_difference; between convs, the largest difference
    if x[0] != y[0]:
        return 1.0
    rel = [abs(u - v) / max(u, v) if max(u, v) > 0 else 0.0 for u, v in zip(x[1:], y[1:], strict=True)]
    if x[0] == "conv2d":
        return max(min(1.0, abs(math.log2(x[1] / y[1]))), *rel[1:])
    return sum(rel) / 3


def test_doubling_a_conv_is_as_far_as_inserting_one():
    g = small_resnet()
    first_conv = next(i for i, layer in enumerate(g.layers) if layer.type == "conv2d")
    wide = wider(g, first_conv)[0]
    deep = deeper(g, rng=random.Random(0))[0]
    d_wide, d_deep = edit_distance(describe(wide), describe(g)), edit_distance(describe(deep), describe(g))
    assert d_deep == pytest.approx(1.0)
    assert d_wide >= d_deep  # NNI's cost put it at 1/6 per doubled conv: UCB never chose a wider child


def _skip_sub(x, y):  # NNI's skip_connection_distance
    if x[2] != y[2]:
        return 1.0
    la, lb = abs(x[1] - x[0]), abs(y[1] - y[0])
    den = max(x[0], y[0]) + max(la, lb)
    return (abs(x[0] - y[0]) + abs(la - lb)) / den if den else 0.0


def test_vectorised_matches_plain_dynamic_programme():
    rng = random.Random(5)
    graphs = []
    for _ in range(30):
        g = small_resnet()
        for _ in range(rng.randint(0, 6)):
            g, _ = random_morphism(g, rng)
        graphs.append(g)
    descs = [describe(g) for g in graphs]
    bank = DescriptorBank()
    for d in descs[:20]:
        bank.add(d)
    dist = bank.distances(descs[20:])
    assert dist.shape == (10, 20)
    for a in range(10):
        for b in range(20):
            want = _naive(descs[20 + a].tokens, descs[b].tokens, _layer_sub) + \
                _naive(descs[20 + a].skips, descs[b].skips, _skip_sub)
            assert abs(dist[a, b] - want) < 1e-4


def test_descriptor_of_the_seeds():
    d = describe(small_resnet())
    assert [t[0] for t in d.tokens].count("conv2d") == 7  # stem + 2 per block on the main chain
    assert d.tokens[-1] == ("dense", 10, 0, 0)
    assert len(d.skips) == 3 and all(kind == 1 for _, _, kind in d.skips)  # the three residual adds
    r = describe(resnet50())
    assert len(r.skips) == 16  # one per bottleneck block
    assert edit_distance(r, r) == 0


def test_morphisms_move_the_descriptor():
    g = small_resnet()
    relu = g.layers[2].output
    deep, _ = deeper(g, relu)
    assert edit_distance(describe(deep), describe(g), skip_weight=0) == 1  # one conv token inserted
    main_bn = g.layers[23].output  # last block, main branch (layer 25 is its shortcut's BN)
    assert g.layers[23].type == "batchnorm2d" and g.layers[26].inputs == (24, 26)
    sk, _ = skip(g, relu, main_bn)
    assert edit_distance(describe(sk), describe(g), skip_weight=0) == 1  # an add on the main chain
    # ... one more skip connection, and the chain after the new add shifts by one node
    assert 2 <= edit_distance(describe(sk), describe(g)) < 2.1
    shortcut_bn = g.layers[25].output
    sk2, _ = skip(g, relu, shortcut_bn)  # joins the shortcut branch: only a skip connection more
    assert edit_distance(describe(sk2), describe(g)) == 1
    assert edit_distance(describe(g), describe(small_resnet())) == 0


def test_bank_grows_past_its_initial_capacity():
    rng = random.Random(9)
    bank = DescriptorBank()
    g = small_resnet()
    descs = []
    for _ in range(40):
        g, _ = random_morphism(g, rng, ops=("deeper", "skip"))
        descs.append(describe(g))
        bank.add(descs[-1])
    dist = bank.distances(descs[-3:])
    assert np.allclose(np.diag(dist[:, -3:]), 0)
    assert (dist[:, :37] > 0).all()


def test_graphs_without_skip_connections():
    from aiperf_runner.spec.graph import Graph

    def plain(width):
        g = Graph([(3, 8, 8)], [])
        x = g.add_layer("conv2d", [0], in_channels=3, filters=width, kernel_size=3, stride=1, padding=1)
        x = g.add_layer("relu", [x])
        x = g.add_layer("global_avgpool2d", [x])
        g.add_layer("dense", [x], in_units=width, units=4)
        return g

    bank = DescriptorBank()
    bank.add(describe(plain(4)))
    # one conv doubled: as far as one conv inserted (see _token_cost)
    assert bank.distances([describe(plain(4)), describe(plain(8))]).tolist() == [[0.0], [pytest.approx(1.0)]]
    assert bank.distances([describe(plain(6))]).tolist() == [[pytest.approx(math.log2(6 / 4))]]
    with_skip = describe(small_resnet())
    assert bank.distances([with_skip])[0, 0] > 3
