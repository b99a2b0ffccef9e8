"""train/builder.py: spec graph -> torch module."""

from __future__ import annotations

import math
import random

import pytest
from aiperf_runner.spec.graph import Graph, GraphError, Layer, load_graph

from tests.graphgen import deeper, random_graph, skip, small_resnet, wider

torch = pytest.importorskip("torch")
from aiperf_runner.train.builder import build_module, classifier_index, resize_classifier  # noqa: E402
from torch import nn  # noqa: E402


def _param_count(g: Graph) -> int:
    total = 0
    for x in g.layers:
        p = x.params
        if x.type == "conv2d":
            total += p["in_channels"] * p["filters"] * p["kernel_size"] ** 2
        elif x.type == "dense":
            total += (p["in_units"] + 1) * p["units"]
        elif x.type == "batchnorm2d":
            total += 2 * p["num_features"]
    return total


def test_resnet50_parameters(reference_resnet50) -> None:
    g = load_graph(str(reference_resnet50))
    with torch.device("meta"):
        m = build_module(g)
    assert sum(p.numel() for p in m.parameters()) == 25_557_032 == _param_count(g)  # torchvision's ResNet-50


@pytest.mark.parametrize("seed", range(25))
def test_generated_graphs_run_forward_and_backward(seed: int) -> None:
    torch.manual_seed(seed)
    g = random_graph(seed)
    m = build_module(g)
    assert sum(p.numel() for p in m.parameters()) == _param_count(g)
    x = torch.randn(3, *g.input_shape)
    y = m(x)
    assert tuple(y.shape) == (3, *g.nodes[g.output_node])
    y.float().pow(2).mean().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.eval()
    with torch.no_grad():
        assert torch.equal(m(x), m(x))  # eval: dropout off, BN running stats


def test_layer_order_does_not_matter() -> None:
    """The same graph with its layer list shuffled computes the same function (same weights)."""
    g = random_graph(11, morphisms=3)
    order = list(range(len(g.layers)))
    random.Random(0).shuffle(order)
    h = Graph(list(g.nodes), [g.layers[i] for i in order])
    a, b = build_module(g).eval(), build_module(h).eval()
    b.load_state_dict({k.replace(f"layers.{k.split('.')[1]}.", f"layers.{order.index(int(k.split('.')[1]))}.", 1): v
                       for k, v in a.state_dict().items()})
    x = torch.randn(2, *g.input_shape)
    with torch.no_grad():
        assert torch.allclose(a(x), b(x))


def test_matches_hand_written_torch() -> None:
    g = Graph([(3, 9, 7)], [])
    a = g.add_layer("conv2d", [0], in_channels=3, filters=4, kernel_size=3, stride=2, padding=1)
    b = g.add_layer("batchnorm2d", [a], num_features=4)
    r = g.add_layer("relu", [b])
    p = g.add_layer("maxpool2d", [r], kernel_size=3, stride=1, padding=1)
    q = g.add_layer("avgpool2d", [r], kernel_size=3, stride=1, padding=1)
    s = g.add_layer("add", [p, q])
    c = g.add_layer("concat", [s, r])
    gp = g.add_layer("global_avgpool2d", [c])
    g.add_layer("dense", [gp], in_units=8, units=5)
    m = build_module(g).eval()
    conv, bn, fc = m.layers["0"], m.layers["1"], m.layers["8"]
    assert isinstance(conv, nn.Conv2d) and conv.bias is None
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 2)
        x = torch.randn(2, 3, 9, 7)
        rr = torch.relu(bn(conv(x)))
        ss = nn.functional.max_pool2d(rr, 3, 1, 1) + nn.functional.avg_pool2d(rr, 3, 1, 1)
        want = fc(torch.cat([ss, rr], 1).mean((2, 3)))
        assert torch.allclose(m(x), want, atol=1e-6)


def test_softmax_at_output_returns_logits_inner_softmax_is_real() -> None:
    g = Graph([(2, 4, 4)], [])
    x = g.add_layer("flatten", [0])
    x = g.add_layer("dense", [x], in_units=32, units=6)
    x = g.add_layer("softmax", [x])
    x = g.add_layer("dense", [x], in_units=6, units=3)
    g.add_layer("softmax", [x])
    m = build_module(g)
    inp = torch.randn(4, 2, 4, 4)
    d1, d2 = m.layers["1"], m.layers["3"]
    want = d2(torch.softmax(d1(inp.flatten(1)), 1))
    assert torch.allclose(m(inp), want)


def test_num_classes_and_classifier_dropout() -> None:
    g = small_resnet((3, 8, 8), classes=10)
    assert classifier_index(g) == len(g.layers) - 1
    m = build_module(g, num_classes=4, dropout=0.5)
    assert m(torch.randn(2, 3, 8, 8)).shape == (2, 4)
    assert isinstance(m.classifier_dropout, nn.Dropout) and m.classifier_dropout.p == 0.5
    h = resize_classifier(g, 4)
    assert h.nodes[h.output_node] == (4,) and g.nodes[g.output_node] == (10,)
    assert resize_classifier(g, 10) is g
    assert build_module(g).classifier_dropout is None
    # dropout really applies in training mode only (the classifier's input is zeroed at p -> 1)
    m = build_module(g, dropout=0.999999).train()
    fc = m.layers[str(classifier_index(g))]
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        assert torch.allclose(m(x), fc.bias.expand(2, -1))  # all inputs dropped (p ~ 1)
        assert not torch.allclose(m.eval()(x), fc.bias.expand(2, -1))
    # through a softmax at the output
    s = g.copy()
    s.add_layer("softmax", [s.output_node])
    assert build_module(s, num_classes=3)(torch.randn(2, 3, 8, 8)).shape == (2, 3)


def test_num_classes_without_classifier_is_an_error() -> None:
    g = Graph([(3, 4, 4)], [])
    g.add_layer("global_avgpool2d", [0])
    with pytest.raises(GraphError, match="dense classifier"):
        build_module(g, num_classes=5)
    assert build_module(g, num_classes=3)(torch.randn(2, 3, 4, 4)).shape == (2, 3)


def test_invalid_graph_names_the_layer() -> None:
    g = small_resnet((3, 8, 8))
    bad = g.copy()
    x = bad.layers[1]
    bad.layers[1] = Layer(x.type, x.inputs, x.output, {"num_features": 99})
    with pytest.raises(GraphError, match="layer 1 .batchnorm2d."):
        build_module(bad)
    with pytest.raises(ValueError, match="dropout"):
        build_module(g, dropout=1.0)


def test_morphism_shapes_build() -> None:
    rng = random.Random(5)
    g = small_resnet((3, 8, 8))
    for op in (deeper, wider, skip, deeper, wider, skip):
        g = op(g, rng) or g
    m = build_module(g)
    y = m(torch.randn(2, 3, 8, 8))
    assert y.shape == (2, 10)
    assert math.isfinite(float(y.detach().sum()))


def test_state_dict_round_trip_and_pickle() -> None:
    import pickle
    g = random_graph(4)
    m = build_module(g)
    m2 = pickle.loads(pickle.dumps(m))
    m.eval(), m2.eval()
    x = torch.randn(2, *g.input_shape)
    with torch.no_grad():
        assert torch.equal(m(x), m2(x))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_unchanged() -> None:
    g = random_graph(2)
    m = build_module(g).cuda()
    x = torch.randn(4, *g.input_shape, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = m(x)
    y.float().sum().backward()
    assert y.shape == (4, *g.nodes[g.output_node]) and y.device.type == "cuda"
