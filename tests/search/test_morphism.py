"""Network morphisms keep graphs valid, append new layers at the end, and change FLOPs as expected."""

from __future__ import annotations

import random

import pytest
from aiperf_runner.search import morphism
from aiperf_runner.search.morphism import MorphismError, deeper, neighbours, random_morphism, skip, wider
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.seeds import resnet50, small_resnet


def _flops(g, rules="v2"):
    return flops_per_image(g, rules=rules, kernel_size=3)


def _same_prefix(before, after, changed=()):
    """Existing layers keep their positions and types (only rewired or re-parameterised)."""
    assert len(after.layers) >= len(before.layers)
    for i, (a, b) in enumerate(zip(before.layers, after.layers, strict=False)):
        assert a.type == b.type, f"layer {i} changed type"
        assert a.output == b.output, f"layer {i} changed its output node"
        if i not in changed:
            assert a.params == b.params, f"layer {i} changed parameters"


@pytest.mark.parametrize("make", [small_resnet, resnet50])
def test_deeper_inserts_conv_bn_relu_after_a_relu(make):
    g = make()
    before = g.dumps()
    relus = [layer.output for layer in g.layers if layer.type == "relu"]
    for r in (relus[0], relus[len(relus) // 2], relus[-1]):
        new, desc = deeper(g, r)
        new.validate()
        assert g.dumps() == before  # input untouched
        assert desc["op"] == "deeper" and desc["after_node"] == r
        _same_prefix(g, new)
        assert [x.type for x in new.layers[len(g.layers):]] == ["conv2d", "batchnorm2d", "relu"]
        conv = new.layers[len(g.layers)]
        assert conv.inputs == (r,) and conv.params["kernel_size"] == 3
        assert conv.params["in_channels"] == conv.params["filters"] == g.nodes[r][0]
        # nobody reads the old ReLU output except the new conv
        assert [x for x in new.layers if r in x.inputs] == [conv]
        for rules in ("v2", "v1-compat"):
            assert _flops(new, rules).eval > _flops(g, rules).eval
            assert _flops(new, rules).train > _flops(g, rules).train
        c, h, w = g.nodes[r]
        assert _flops(new).eval - _flops(g).eval >= 2 * 9 * c * c * h * w  # at least the new conv's MACs


def test_deeper_rejects_a_non_relu():
    g = small_resnet()
    with pytest.raises(MorphismError):
        deeper(g, g.layers[0].output)


def test_wider_local_conv_doubles_its_flops():
    g = small_resnet()
    local = [i for i in morphism.widenable_convs(g) if wider(g, i)[1]["local"]]
    assert local, "the small ResNet has convs whose widening is local"
    for i in local:
        new, desc = wider(g, i)
        new.validate()
        _same_prefix(g, new, changed=set(desc["changed_layers"]))
        assert new.layers[i].params["filters"] == 2 * g.layers[i].params["filters"]
        before = _flops(g).per_layer if False else flops_per_image(g, per_layer=True).per_layer
        after = flops_per_image(new, per_layer=True).per_layer
        fwd_before = {x.index: x.forward for x in before if x.type == "conv2d"}
        fwd_after = {x.index: x.forward for x in after if x.type == "conv2d"}
        assert fwd_after[i] == 2 * fwd_before[i]
        # the consumer conv reads twice the channels: its FLOPs double too
        consumers = [k for k, layer in enumerate(g.layers) if layer.type == "conv2d" and k != i
                     and new.layers[k].params["in_channels"] != layer.params["in_channels"]]
        assert consumers
        for k in consumers:
            assert fwd_after[k] == 2 * fwd_before[k]
        for rules in ("v2", "v1-compat"):
            assert _flops(new, rules).train > _flops(g, rules).train


@pytest.mark.parametrize("make", [small_resnet, resnet50])
def test_wider_keeps_add_connected_groups_consistent(make):
    g = make()
    for i in morphism.widenable_convs(g):
        new, desc = wider(g, i)
        new.validate()  # every add still sees equal shapes, every BN / consumer matches
        assert len(new.layers) == len(g.layers)
        for p in desc["producers"]:
            assert new.layers[p].params["filters"] == desc["to"] == 2 * desc["from"]
        if make is resnet50 and i > 20:
            break  # enough for ResNet-50 (its groups are large)


def test_wider_widens_the_classifier_input():
    g = small_resnet()
    last_conv = max(i for i, x in enumerate(g.layers) if x.type == "conv2d")
    new, desc = wider(g, last_conv)
    dense = new.layers[-1]
    assert dense.type == "dense" and dense.params["in_units"] == 2 * g.layers[-1].params["in_units"]
    assert not desc["local"]


def test_wider_respects_max_filters():
    g = small_resnet(width=16)
    with pytest.raises(MorphismError):
        wider(g, 0, max_filters=16)


@pytest.mark.parametrize("make", [small_resnet, resnet50])
def test_skip_adds_a_strided_projection_and_an_add(make, rng):
    g = make()
    for _ in range(5):
        new, desc = skip(g, rng=rng)
        new.validate()
        _same_prefix(g, new)
        added = new.layers[len(g.layers):]
        assert [x.type for x in added] == ["conv2d", "batchnorm2d", "add"]
        conv = added[0]
        assert conv.params["kernel_size"] == 1 and conv.params["stride"] == desc["stride"]
        assert conv.inputs == (desc["from_node"],)
        assert desc["to_node"] in added[2].inputs
        assert g.layers[[x.output for x in g.layers].index(desc["from_node"])].type == "relu"
        assert g.layers[[x.output for x in g.layers].index(desc["to_node"])].type == "batchnorm2d"
        for rules in ("v2", "v1-compat"):
            assert _flops(new, rules).eval > _flops(g, rules).eval
            assert _flops(new, rules).train > _flops(g, rules).train


def test_skip_across_a_downsampling_uses_a_stride():
    g = small_resnet()
    first_relu = g.layers[2].output  # stem, 16x16
    last_bn = [x.output for x in g.layers if x.type == "batchnorm2d" and g.nodes[x.output][1] == 4][-1]
    new, desc = skip(g, first_relu, last_bn)
    assert desc["stride"] == 4
    new.validate()


def test_skip_rejects_backward_connections():
    g = small_resnet()
    bn_early = g.layers[1].output
    relu_late = [x.output for x in g.layers if x.type == "relu"][-1]
    with pytest.raises(MorphismError):
        skip(g, relu_late, bn_early)


def test_every_enumerated_neighbour_applies(seed_graph):
    ms = neighbours(seed_graph)
    assert {m.op for m in ms} == {"deeper", "wider", "skip"}
    hashes = set()
    for m in ms:
        new, desc = morphism.apply(seed_graph, m)
        new.validate()
        assert desc["op"] == m.op
        hashes.add(new.hash())
    assert len(hashes) > len(ms) // 2


def test_random_chains_stay_valid():
    rng = random.Random(7)
    ops = set()
    for seed in (small_resnet(), small_resnet(num_classes=5, image_size=24, width=8, blocks=(2, 1))):
        for _chain in range(12):
            g = seed
            for _step in range(8):
                g, desc = random_morphism(g, rng)
                ops.add(desc["op"])
                g.validate()
            # v2 and v1-compat FLOPs are computable and grow with the chain
            assert _flops(g).train > _flops(seed).train
            assert _flops(g, "v1-compat").train > _flops(seed, "v1-compat").train
            assert morphism.param_count(g) > morphism.param_count(seed)
    assert ops == {"deeper", "wider", "skip"}


def test_morphed_graph_builds_and_runs_in_torch():
    torch = pytest.importorskip("torch")
    from aiperf_runner.train.builder import build_module

    rng = random.Random(3)
    g = small_resnet(width=4, image_size=16)
    for op in ("deeper", "wider", "skip", "skip", "wider", "deeper"):
        g, _ = random_morphism(g, rng, ops=(op,))
    out = build_module(g)(torch.zeros(2, 3, 16, 16))
    assert tuple(out.shape) == (2, 10)
