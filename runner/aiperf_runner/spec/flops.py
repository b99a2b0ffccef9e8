"""Analytic FLOPs per image of an architecture graph (torch-free).

`flops_per_image(graph, rules="v2", kernel_size=3) -> FlopCounts`

- eval FLOP/image  = forward
- train FLOP/image = forward + backward

Two rule sets (docs/score.md, "FLOPs per image", is the operator-facing statement of both):

`v1-compat` restates the original AIPerf profiler exactly, quirks included, so that scores compare
with published AIPerf results (test vector: the reference ResNet-50 with kernel_size 3 gives
eval 7,806,583,495 and train 23,053,458,315 FLOP/image).

`v2` (default): conv and dense layers count exactly what `torch.utils.flop_counter.FlopCounterMode`
counts for the module `train.builder.build_module` builds (2 FLOP per multiply-accumulate; backward
= weight gradient + input gradient, the latter only when the layer's input requires a gradient,
i.e. some layer upstream has parameters); elementwise layers are counted with the per-element
constants of `V2_COSTS`, forward and backward, and scale with tensor size. No position-based kernel
override: `kernel_size` is ignored under v2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .graph import Graph, GraphError

RULES = ("v2", "v1-compat")
"""The FLOP rules, the default first (spec/scoring.py and the commands take them from here)."""
DEFAULT_RULES = "v2"

# v1-compat: the n-th layer in list order (1-based) with n > V1_KERNEL_QUIRK_AFTER is a conv charged
# with the trial's kernel_size instead of its own.
V1_KERNEL_QUIRK_AFTER = 175

# v2 per-element constants (operation costs: add 1, multiply 1, compare 1, divide 4, exp 8).
# "n" is the number of elements of the layer's input per image (pooling: of its output, "n_out").
V2_COSTS: dict[str, dict[str, int]] = {
    # forward: mean 1 add; variance 3 (subtract, square, add); normalise 1 multiply (re-using x - mean);
    # affine 2 (multiply, add).  backward: weight gradients 3 (sum dy; sum dy*xhat: multiply, add),
    # input gradient 4 more (xhat * sum, two subtractions, scale), only when the input needs a gradient.
    "batchnorm2d": {"forward": 7, "backward_weight": 3, "backward_input": 4},
    "relu": {"forward": 1, "backward_input": 1},                 # compare; masked select
    "add": {"forward": 1, "backward_input": 0},                  # the gradient passes through
    # pooling, per OUTPUT element with a K x K window (see _v2_layers):
    #   maxpool2d: forward K*K - 1 compares; backward 1 (scatter-add of the output gradient)
    #   avgpool2d: forward K*K (K*K - 1 adds, 1 multiply); backward K*K + 1 (1 multiply, K*K scatter-adds)
    # per input element: (H*W - 1) adds + 1 multiply per channel = n; backward: n (grad / (H*W) spread)
    "global_avgpool2d": {"forward": 1, "backward_input": 1},
    # softmax(dim=1) inside the graph: max 1, subtract 1, exp 8, sum 1, divide 4 = 15;
    # backward: p*g 1, sum 1, subtract 1, multiply 1 = 4
    "softmax": {"forward": 15, "backward_input": 4},
    # cross-entropy on the output (log-softmax + NLL): max 1, subtract 1, exp 8, sum 1, subtract 1 = 12;
    # backward: exp 8, multiply 1, subtract 1 = 10.  A softmax layer producing the graph's output is
    # an identity in the built module (it returns logits) and is folded into this term (0 itself).
    "loss": {"forward": 12, "backward_input": 10},
    # gradient accumulation where a tensor feeds k > 1 layers: (k - 1) adds per element
    "fanout": {"backward_per_extra_consumer": 1},
    # concat, dropout, flatten: copies / masks, 0
}

_PARAM_LAYERS = frozenset({"conv2d", "dense", "batchnorm2d"})


@dataclass(frozen=True)
class LayerFlops:
    """FLOPs per image of one layer. `index` is the layer's position in `graph.layers`.

    v2 adds two kinds of entries that are not layers: type "grad_accumulate" (index = the layer whose
    output feeds several layers: the backward adds their gradients) and type "loss" (index None).
    v1-compat max pooling may be fractional (a Fraction)."""

    index: int | None
    type: str
    forward: int | Fraction
    backward: int | Fraction

    def to_json(self) -> dict[str, Any]:
        def num(v: int | Fraction) -> int | float:
            return int(v) if v == int(v) else float(v)
        return {"index": self.index, "type": self.type, "forward": num(self.forward),
                "backward": num(self.backward)}


@dataclass(frozen=True)
class FlopCounts:
    """Per-image FLOP counts (integers). train = forward + backward; eval = forward."""

    eval: int
    train: int
    forward: int
    backward: int
    rules: str = DEFAULT_RULES
    kernel_size: int = 3
    per_layer: list[LayerFlops] | None = field(default=None, compare=False)

    def to_json(self, per_layer: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"rules": self.rules, "kernel_size": self.kernel_size,
                               "eval_flops_per_image": self.eval, "train_flops_per_image": self.train,
                               "forward_flops_per_image": self.forward,
                               "backward_flops_per_image": self.backward}
        if per_layer and self.per_layer is not None:
            out["per_layer"] = [x.to_json() for x in self.per_layer]
        return out


def _round_half_up(x: int | Fraction) -> int:
    """Nearest integer, halves rounded up (v1-compat's only non-integer term is max pooling)."""
    return math.floor(Fraction(x) + Fraction(1, 2))


def flops_per_image(graph: Graph, rules: str = DEFAULT_RULES, kernel_size: int = 3,
                    per_layer: bool = False) -> FlopCounts:
    """Analytic FLOPs per image of `graph` under `rules` ("v2" or "v1-compat").

    The graph is validated first (GraphError names the offending layer). `kernel_size` is the
    trial's kernel-size hyper-parameter, used only by v1-compat's position quirk.
    `per_layer=True` fills `FlopCounts.per_layer`.
    """
    if rules not in RULES:
        raise ValueError(f"unknown FLOP rules {rules!r} (expected one of {', '.join(RULES)})")
    kernel_size = int(kernel_size)
    if kernel_size < 1:
        raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
    graph.validate()
    layers = _v1_layers(graph, kernel_size) if rules == "v1-compat" else _v2_layers(graph)
    forward = sum((x.forward for x in layers), start=0)
    backward = sum((x.backward for x in layers), start=0)
    fwd = _round_half_up(forward)
    train = _round_half_up(forward + backward)
    return FlopCounts(eval=fwd, train=train, forward=fwd, backward=train - fwd, rules=rules,
                      kernel_size=kernel_size, per_layer=layers if per_layer else None)


# ---- v1-compat ------------------------------------------------------------------------------------

def _v1_layers(graph: Graph, kernel_size: int) -> list[LayerFlops]:
    """The original profiler, restated in docs/score.md ("v1-compat"), layer by layer in list order.

    Shapes: our nodes are (C, H, W); the original's "H" (first spatial dim) is our shape[1].
    """
    out: list[LayerFlops] = []
    first_conv = True
    for i, layer in enumerate(graph.layers):
        count = i + 1
        p = layer.params
        x = graph.nodes[layer.inputs[0]]
        t = layer.type
        fwd: int | Fraction = 0
        bwd: int | Fraction = 0
        if t == "conv2d":
            k = kernel_size if count > V1_KERNEL_QUIRK_AFTER else int(p["kernel_size"])
            ho = (x[1] + 2 * int(p["padding"]) - k) // int(p["stride"]) + 1
            if ho < 1:  # a kernel larger than its input: the original would square a negative size
                raise GraphError(f"layer {i} (conv2d): with kernel size {k} its output would be smaller than "
                                 f"1x1 (input {x[1]}x{x[2]}, padding {p['padding']})")
            kcc = k * k * int(p["in_channels"]) * int(p["filters"])
            fwd = 2 * ho * ho * kcc
            bwd = kcc * (2 * ho * ho + 2) if first_conv else kcc * (4 * ho * ho + 2)
            first_conv = False
        elif t == "dense":
            n_in, n_out = int(p["in_units"]), int(p["units"])
            fwd = 2 * n_in * n_out + 13 * n_out - 1
            bwd = 4 * n_in * n_out + 2 * (n_in + 1) * n_out
        elif t == "batchnorm2d":
            fwd = 7 * math.prod(x)
            bwd = 36
        elif t == "relu":
            fwd = math.prod(x)
        elif t == "add":
            if all(tuple(graph.nodes[n]) == tuple(x) for n in layer.inputs):
                fwd = math.prod(x)
        elif t == "maxpool2d":
            fwd = Fraction(math.prod(x) * int(p["kernel_size"]) ** 2, int(p["stride"]) ** 2)
        elif t == "global_avgpool2d":
            c, h, w = x
            fwd = (h * w - 1) * c + 4 * c
        # avgpool2d, concat, dropout, flatten, softmax: 0 (the original's "others")
        out.append(LayerFlops(i, t, fwd, bwd))
    return out


# ---- v2 -------------------------------------------------------------------------------------------

def _v2_layers(graph: Graph) -> list[LayerFlops]:
    nodes = graph.nodes
    consumers = graph.consumers()
    output = graph.output_node
    # requires_grad of every node, as autograd sees it: the input does not; a node does when its
    # layer has parameters or any of its inputs does.
    rg: dict[int, bool] = {graph.input_node: False}
    for i in graph.topological_order():
        layer = graph.layers[i]
        rg[layer.output] = layer.type in _PARAM_LAYERS or any(rg[n] for n in layer.inputs)

    out: list[LayerFlops] = []
    for i, layer in enumerate(graph.layers):
        t, p = layer.type, layer.params
        x = nodes[layer.inputs[0]]
        y = nodes[layer.output]
        n = math.prod(x)
        n_out = math.prod(y)
        grad_in = any(rg[k] for k in layer.inputs)
        c = V2_COSTS.get(t, {})
        fwd = 0
        bwd = 0
        if t == "conv2d":
            # FlopCounterMode: 2 * N * prod(weight) * Ho * Wo, for the input and weight gradients too
            fwd = 2 * int(p["in_channels"]) * int(p["filters"]) * int(p["kernel_size"]) ** 2 * y[1] * y[2]
            bwd = fwd * (2 if grad_in else 1)
        elif t == "dense":
            # addmm / mm: 2 * in * out; the bias add and bias gradient are not counted (as FlopCounterMode)
            fwd = 2 * int(p["in_units"]) * int(p["units"])
            bwd = fwd * (2 if grad_in else 1)
        elif t == "batchnorm2d":
            fwd = c["forward"] * n
            bwd = (c["backward_weight"] + (c["backward_input"] if grad_in else 0)) * n
        elif t in ("relu", "add", "global_avgpool2d"):
            fwd = c["forward"] * n
            bwd = c["backward_input"] * n if grad_in else 0
        elif t == "maxpool2d":
            kk = int(p["kernel_size"]) ** 2
            fwd = (kk - 1) * n_out
            bwd = n_out if grad_in else 0
        elif t == "avgpool2d":
            kk = int(p["kernel_size"]) ** 2
            fwd = kk * n_out
            bwd = (kk + 1) * n_out if grad_in else 0
        elif t == "softmax":
            if layer.output != output:  # at the output it is folded into the loss term
                fwd = c["forward"] * n
                bwd = c["backward_input"] * n if grad_in else 0
        # concat, dropout, flatten: 0
        out.append(LayerFlops(i, t, fwd, bwd))
        # gradient accumulation where this layer's output feeds k > 1 layers (its own entry, so that
        # conv/dense entries stay exactly what FlopCounterMode counts)
        k = len(consumers.get(layer.output, []))
        if k > 1 and rg[layer.output]:
            out.append(LayerFlops(i, "grad_accumulate", 0,
                                  (k - 1) * V2_COSTS["fanout"]["backward_per_extra_consumer"] * n_out))
    # the training loss on the output (the builder returns logits; cross-entropy takes them)
    n_logits = math.prod(nodes[output])
    loss = V2_COSTS["loss"]
    out.append(LayerFlops(None, "loss", loss["forward"] * n_logits,
                          loss["backward_input"] * n_logits if rg[output] else 0))
    return out


def matmul_flops(counts: FlopCounts) -> tuple[int, int]:
    """(forward, backward) of the conv and dense layers only: what FlopCounterMode counts (v2)."""
    if counts.per_layer is None:
        raise ValueError("matmul_flops needs counts made with per_layer=True")
    layers = [x for x in counts.per_layer if x.type in ("conv2d", "dense")]
    return int(sum(x.forward for x in layers)), int(sum(x.backward for x in layers))
