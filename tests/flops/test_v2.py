"""v2: conv/dense counts equal torch's FlopCounterMode on the built module; elementwise terms scale."""

from __future__ import annotations

import math

import pytest
from aiperf_runner.spec.flops import V2_COSTS, flops_per_image, matmul_flops
from aiperf_runner.spec.graph import Graph, load_graph

from tests.graphgen import random_graph, random_graphs, small_resnet

torch = pytest.importorskip("torch")
from aiperf_runner.train.flopcount import measure_graph  # noqa: E402

N_GENERATED = 200


def test_resnet50_matches_flop_counter(reference_resnet50) -> None:
    g = load_graph(str(reference_resnet50))
    c = flops_per_image(g, per_layer=True)
    m = measure_graph(g)  # meta device, 224x224: counted, not computed
    assert matmul_flops(c) == (m.forward, m.backward)
    assert (m.forward, m.backward) == (7_715_946_496, 15_195_865_088)
    assert c.eval == c.forward and c.train == c.forward + c.backward
    assert all(isinstance(v, int) for v in (c.eval, c.train, c.forward, c.backward))


def test_resnet50_64px_on_cpu_matches_flop_counter(reference_resnet50) -> None:
    """Real tensors on the CPU, batch 1, input 64x64: the same counts rule as at 224 on meta."""
    from aiperf_runner.spec.graph import from_reference, to_reference
    ref = to_reference(load_graph(str(reference_resnet50)))
    side = {224: 64, 112: 32, 56: 16, 28: 8, 14: 4, 7: 2}  # every stride and padding still fits

    def shrink(shape: list[int]) -> list[int]:
        return [side[shape[0]], side[shape[1]], shape[2]] if len(shape) == 3 else shape

    ref["node_list"] = [[i, shrink(s)] for i, s in ref["node_list"]]
    g = from_reference(ref)
    g.validate()
    c = flops_per_image(g, per_layer=True)
    m = measure_graph(g, batch=1, device="cpu")
    assert matmul_flops(c) == (m.forward, m.backward)


def test_generated_graphs_match_flop_counter() -> None:
    mismatches = []
    for i, g in enumerate(random_graphs(N_GENERATED, seed=7)):
        c = flops_per_image(g, per_layer=True)
        m = measure_graph(g)
        if matmul_flops(c) != (m.forward, m.backward):
            mismatches.append((i, matmul_flops(c), (m.forward, m.backward)))
    assert not mismatches, mismatches[:5]


def test_meta_and_cpu_measure_the_same() -> None:
    for seed in range(8):
        g = random_graph(seed)
        assert measure_graph(g, device="meta") == measure_graph(g, device="cpu")


def test_first_layer_has_no_input_gradient() -> None:
    g = Graph([(3, 8, 8)], [])
    x = g.add_layer("conv2d", [0], in_channels=3, filters=4, kernel_size=3, stride=1, padding=1)
    x = g.add_layer("relu", [x])
    x = g.add_layer("conv2d", [x], in_channels=4, filters=4, kernel_size=3, stride=1, padding=1)
    x = g.add_layer("flatten", [x])
    g.add_layer("dense", [x], in_units=256, units=10)
    c = flops_per_image(g, per_layer=True)
    conv0, relu, conv1, _, dense = c.per_layer[:5]
    assert conv0.forward == 2 * 3 * 4 * 9 * 64 and conv0.backward == conv0.forward
    assert conv1.backward == 2 * conv1.forward
    assert dense.forward == 2 * 256 * 10 and dense.backward == 2 * dense.forward
    assert relu.type == "relu" and relu.backward == 4 * 64  # its input comes from a conv: needs a gradient
    m = measure_graph(g)
    assert matmul_flops(c) == (m.forward, m.backward)


@pytest.mark.parametrize("stem,conv_bwd_factor", [("maxpool2d", 1), ("relu", 1), ("avgpool2d", 1),
                                                  ("batchnorm2d", 2)])
def test_input_gradient_follows_requires_grad(stem: str, conv_bwd_factor: int) -> None:
    """A conv after a parameter-free layer on the input gets no input gradient; after a BN it does."""
    g = Graph([(3, 8, 8)], [])
    params = {"maxpool2d": {"kernel_size": 2, "stride": 1, "padding": 0},
              "avgpool2d": {"kernel_size": 3, "stride": 1, "padding": 1},
              "relu": {}, "batchnorm2d": {"num_features": 3}}[stem]
    x = g.add_layer(stem, [0], **params)
    x = g.add_layer("conv2d", [x], in_channels=3, filters=4, kernel_size=3, stride=1, padding=1)
    x = g.add_layer("global_avgpool2d", [x])
    g.add_layer("dense", [x], in_units=4, units=3)
    c = flops_per_image(g, per_layer=True)
    stem_l, conv = c.per_layer[0], c.per_layer[1]
    assert conv.backward == conv_bwd_factor * conv.forward
    if stem == "batchnorm2d":
        assert stem_l.backward == V2_COSTS["batchnorm2d"]["backward_weight"] * 3 * 64
    else:
        assert stem_l.backward == 0  # nothing upstream needs a gradient
    m = measure_graph(g)
    assert matmul_flops(c) == (m.forward, m.backward)


def test_elementwise_counts_scale_with_tensor_size() -> None:
    """Every elementwise term scales with H*W (x4 for 2x the side) and with channels (x2 for 2x widths)."""
    base = flops_per_image(small_resnet((3, 8, 8), widths=(4, 8)), per_layer=True).per_layer
    big = flops_per_image(small_resnet((3, 16, 16), widths=(4, 8)), per_layer=True).per_layer
    wide = flops_per_image(small_resnet((3, 8, 8), widths=(8, 16)), per_layer=True).per_layer
    elementwise = {"batchnorm2d", "relu", "add", "global_avgpool2d"}
    seen = set()
    for a, b, w in zip(base, big, wide, strict=True):
        assert a.type == b.type == w.type
        if a.type in elementwise:
            seen.add(a.type)
            assert a.forward > 0 and (a.backward > 0 or a.type == "add"), a
            assert (b.forward, b.backward) == (4 * a.forward, 4 * a.backward), a
            if a.index not in (0, 1, 2):  # the stem's input has 3 channels in both
                assert (w.forward, w.backward) == (2 * a.forward, 2 * a.backward), a
    assert seen == elementwise


@pytest.mark.parametrize("pool", ["maxpool2d", "avgpool2d"])
def test_pooling_counts(pool: str) -> None:
    def graph(side: int) -> Graph:
        g = Graph([(3, side, side)], [])
        x = g.add_layer("conv2d", [0], in_channels=3, filters=4, kernel_size=1, stride=1, padding=0)
        x = g.add_layer(pool, [x], kernel_size=3, stride=2, padding=1)
        x = g.add_layer("flatten", [x])
        g.add_layer("dense", [x], in_units=math.prod(g.nodes[x]), units=2)
        return g
    small, large = (flops_per_image(graph(s), per_layer=True).per_layer[1] for s in (8, 16))
    n_out = 4 * 4 * 4
    if pool == "maxpool2d":
        assert (small.forward, small.backward) == (8 * n_out, n_out)
    else:
        assert (small.forward, small.backward) == (9 * n_out, 10 * n_out)
    assert (large.forward, large.backward) == (4 * small.forward, 4 * small.backward)


def test_loss_softmax_and_fanout_terms() -> None:
    g = Graph([(3, 4, 4)], [])
    a = g.add_layer("conv2d", [0], in_channels=3, filters=2, kernel_size=1, stride=1, padding=0)
    b = g.add_layer("relu", [a])
    s = g.add_layer("add", [a, b])  # node a feeds 2 layers: one gradient accumulation
    x = g.add_layer("concat", [s, b])  # node b feeds 2 layers as well
    x = g.add_layer("flatten", [x])
    x = g.add_layer("dropout", [x], rate=0.5)
    x = g.add_layer("dense", [x], in_units=64, units=8)
    x = g.add_layer("softmax", [x])  # inside: counted
    x = g.add_layer("dense", [x], in_units=8, units=5)
    g.add_layer("softmax", [x])  # produces the output: folded into the loss
    c = flops_per_image(g, per_layer=True)
    by = {(x.index, x.type): x for x in c.per_layer}
    n = 2 * 16
    assert by[(0, "conv2d")].backward == 2 * 3 * 2 * 16  # weight grad only (first layer)
    assert by[(0, "grad_accumulate")].backward == n  # node a feeds 2 layers: 1 add per element
    assert by[(1, "relu")].backward == n  # masked select
    assert by[(1, "grad_accumulate")].backward == n
    assert by[(2, "add")].forward == n and by[(2, "add")].backward == 0
    assert by[(3, "concat")].forward == by[(3, "concat")].backward == 0
    assert by[(5, "dropout")].forward == by[(5, "dropout")].backward == 0
    assert (by[(7, "softmax")].forward, by[(7, "softmax")].backward) == (15 * 8, 4 * 8)
    assert by[(9, "softmax")].forward == by[(9, "softmax")].backward == 0
    loss = by[(None, "loss")]
    assert (loss.forward, loss.backward) == (12 * 5, 10 * 5)
    m = measure_graph(g)
    assert matmul_flops(c) == (m.forward, m.backward)


def test_v2_ignores_kernel_size_and_reports_integers() -> None:
    for seed in range(20):
        g = random_graph(seed)
        a, b = flops_per_image(g, kernel_size=3), flops_per_image(g, kernel_size=7)
        assert (a.eval, a.train) == (b.eval, b.train)
        assert all(isinstance(v, int) for v in (a.eval, a.train, a.forward, a.backward))
        assert a.eval == a.forward and a.train == a.forward + a.backward
        assert a.train > a.eval > 0


def test_v2_default_rules() -> None:
    g = random_graph(3)
    assert flops_per_image(g) == flops_per_image(g, rules="v2")
    assert flops_per_image(g).rules == "v2"
