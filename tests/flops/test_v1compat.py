"""v1-compat: the original AIPerf profiler, exactly (docs/score.md)."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from aiperf_runner.spec.flops import V1_KERNEL_QUIRK_AFTER, flops_per_image
from aiperf_runner.spec.graph import Graph, GraphError, from_reference, load_graph, to_reference

from tests.graphgen import deeper, random_graph
from tests.helpers import REFERENCE_DIR

EVAL = 7_806_583_495
TRAIN = 23_053_458_315


def test_the_reference_copy_is_the_shared_file(reference_resnet50) -> None:
    shared = REFERENCE_DIR / "resnet50.json"
    if not shared.exists():
        pytest.skip(f"{shared} is not beside this checkout; the copy in tests/data is used")
    assert reference_resnet50.read_bytes() == shared.read_bytes()


def test_resnet50_test_vector(reference_resnet50) -> None:
    g = load_graph(str(reference_resnet50))
    c = flops_per_image(g, rules="v1-compat", kernel_size=3)
    assert (c.eval, c.train) == (EVAL, TRAIN)
    assert isinstance(c.eval, int) and isinstance(c.train, int)
    assert c.forward == c.eval and c.forward + c.backward == c.train
    assert c.rules == "v1-compat" and c.kernel_size == 3


def test_resnet50_native_round_trip_same_counts(reference_resnet50) -> None:
    g = load_graph(str(reference_resnet50))
    for h in (Graph.from_json(g.to_json()), from_reference(to_reference(g))):
        c = flops_per_image(h, rules="v1-compat", kernel_size=3)
        assert (c.eval, c.train) == (EVAL, TRAIN)


def test_resnet50_untouched_by_kernel_quirk(reference_resnet50) -> None:
    """ResNet-50 has 174 layers: the position quirk (count > 175) never applies to it."""
    g = load_graph(str(reference_resnet50))
    assert len(g.layers) == 174
    for k in (1, 5, 7):
        c = flops_per_image(g, rules="v1-compat", kernel_size=k)
        assert (c.eval, c.train) == (EVAL, TRAIN)


def test_resnet50_per_layer_terms(reference_resnet50) -> None:
    g = load_graph(str(reference_resnet50))
    c = flops_per_image(g, rules="v1-compat", kernel_size=3, per_layer=True)
    layers = c.per_layer
    assert layers is not None and len(layers) == 174
    # first conv: 7x7, 3 -> 64, stride 2, 224 -> 112; backward without the input gradient term
    first = layers[0]
    kcc = 7 * 7 * 3 * 64
    assert first.type == "conv2d"
    assert first.forward == 2 * 112 * 112 * kcc
    assert first.backward == kcc * (2 * 112 * 112 + 2)
    # every other conv: K^2 Cin Cout (4 Ho^2 + 2)
    conv = layers[4]
    assert conv.type == "conv2d" and conv.backward == 64 * 64 * (4 * 56 * 56 + 2)
    bns = [x for x in layers if x.type == "batchnorm2d"]
    assert all(x.backward == 36 for x in bns)
    assert bns[0].forward == 7 * 112 * 112 * 64
    pool = layers[3]
    assert pool.type == "maxpool2d" and pool.forward == Fraction(112 * 112 * 64 * 9, 4) and pool.backward == 0
    gap = layers[172]
    assert gap.type == "global_avgpool2d" and gap.forward == (7 * 7 - 1) * 2048 + 4 * 2048
    dense = layers[173]
    assert dense.forward == 2 * 2048 * 1000 + 13 * 1000 - 1
    assert dense.backward == 4 * 2048 * 1000 + 2 * 2049 * 1000
    assert all(x.backward == 0 for x in layers if x.type in ("relu", "add", "maxpool2d", "global_avgpool2d"))
    assert sum(x.forward for x in layers) == EVAL


def test_kernel_quirk_after_position_175(reference_resnet50) -> None:
    """Deeper twice: the first new conv is layer 175 (own kernel), the second is 178 (charged with K)."""
    g = load_graph(str(reference_resnet50))
    rng = random.Random(1)
    g = deeper(deeper(g, rng), rng)
    convs = [i for i, x in enumerate(g.layers) if x.type == "conv2d" and i >= 174]
    assert [i + 1 for i in convs] == [175, 178]
    for k in (1, 3, 5):
        c = flops_per_image(g, rules="v1-compat", kernel_size=k, per_layer=True)
        own, quirk = c.per_layer[convs[0]], c.per_layer[convs[1]]
        ch, h = g.nodes[g.layers[convs[0]].inputs[0]][:2]
        assert own.forward == 2 * h * h * 9 * ch * ch  # 3x3 pad 1: Ho = H
        ch2, h2 = g.nodes[g.layers[convs[1]].inputs[0]][:2]
        ho = (h2 + 2 * 1 - k) // 1 + 1  # stored padding 1 kept with kernel k
        assert quirk.forward == 2 * ho * ho * k * k * ch2 * ch2
        assert quirk.backward == k * k * ch2 * ch2 * (4 * ho * ho + 2)
    assert V1_KERNEL_QUIRK_AFTER == 175


def test_pooling_fraction_rounded_half_up() -> None:
    # maxpool K=1 stride 2 on (2, 1, 1): 2 * 1 / 4 = 0.5 FLOP; conv K=1 on (2,1,1) -> (1,1,1)
    g = Graph([(2, 1, 1)], [])
    x = g.add_layer("maxpool2d", [0], kernel_size=1, stride=2, padding=0)
    g.add_layer("conv2d", [x], in_channels=2, filters=1, kernel_size=1, stride=1, padding=0)
    c = flops_per_image(g, rules="v1-compat", per_layer=True)
    assert c.per_layer[0].forward == Fraction(1, 2)
    conv_fwd = 2 * 1 * 1 * 2 * 1
    assert c.eval == conv_fwd + 1  # 4.5 -> 5 (half up)
    assert c.train == math.floor(Fraction(9, 2) + 1 * 2 * (2 + 2) + Fraction(1, 2))
    assert c.per_layer[0].to_json()["forward"] == 0.5


def test_v1_uses_first_spatial_dim_only() -> None:
    """Non-square input: v1-compat charges Ho^2 with Ho from H (our shape[1])."""
    g = Graph([(3, 10, 6)], [])
    g.add_layer("conv2d", [0], in_channels=3, filters=4, kernel_size=3, stride=1, padding=1)
    c = flops_per_image(g, rules="v1-compat")
    assert c.eval == 2 * 10 * 10 * 9 * 3 * 4


def test_generated_graphs_are_integers_and_consistent() -> None:
    for seed in range(40):
        g = random_graph(seed)
        c = flops_per_image(g, rules="v1-compat", kernel_size=5, per_layer=True)
        assert isinstance(c.eval, int) and isinstance(c.train, int)
        assert c.train >= c.eval > 0
        exact = sum(x.forward for x in c.per_layer)
        assert abs(c.eval - exact) <= Fraction(1, 2)


def test_invalid_graph_rejected() -> None:
    g = Graph([(3, 8, 8), (4, 8, 8)], [])
    from aiperf_runner.spec.graph import Layer
    g.layers.append(Layer("conv2d", (0,), 1, {"in_channels": 2, "filters": 4, "kernel_size": 3, "stride": 1, "padding": 1}))
    with pytest.raises(GraphError, match="layer 0"):
        flops_per_image(g, rules="v1-compat")
    with pytest.raises(ValueError, match="rules"):
        flops_per_image(random_graph(0), rules="v3")


@pytest.mark.parametrize("t,params", [
    ("maxpool2d", {"kernel_size": 2, "stride": 0, "padding": 0}),
    ("avgpool2d", {"kernel_size": 0, "stride": 1, "padding": 0}),
    ("conv2d", {"in_channels": 3, "filters": 2, "kernel_size": 1, "stride": 1, "padding": -1}),
])
def test_bad_parameters_are_graph_errors(t: str, params: dict) -> None:
    """Zero strides/kernels and negative padding: a GraphError naming the layer, never a crash."""
    from aiperf_runner.spec.graph import Layer
    g = Graph([(3, 4, 4), (3, 4, 4)], [Layer(t, (0,), 1, params)])
    for rules in ("v1-compat", "v2"):
        with pytest.raises(GraphError, match=f"layer 0 .{t}."):
            flops_per_image(g, rules=rules)
