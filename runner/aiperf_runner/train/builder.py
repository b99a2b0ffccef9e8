"""Spec graph -> torch.nn.Module.

`build_module(graph, num_classes=None, dropout=0.0)` returns a module that executes the graph's
layers in topological order on a batch `(N, C, H, W)` and returns the output node's tensor
(for a classifier: the logits, shape `(N, classes)`).

Layer mapping (see docs/score.md, "FLOPs per image", for how each is counted):

| graph layer        | torch                                                              |
| ------------------ | ------------------------------------------------------------------ |
| `conv2d`           | `nn.Conv2d(in, filters, K, stride, padding, bias=False)`           |
| `dense`            | `nn.Linear(in_units, units)` (with bias)                           |
| `batchnorm2d`      | `nn.BatchNorm2d(num_features)`                                     |
| `relu`             | `F.relu` (not in place: a ReLU output may feed a skip connection)  |
| `maxpool2d`        | `F.max_pool2d(x, K, stride, padding)`                              |
| `avgpool2d`        | `F.avg_pool2d(x, K, stride, padding)` (padding counted in average) |
| `global_avgpool2d` | `x.mean((2, 3))` -> `(N, C)`                                       |
| `add`              | `a + b`                                                            |
| `concat`           | `torch.cat(inputs, dim=1)`                                         |
| `dropout`          | `nn.Dropout2d(rate)` on `(C, H, W)` tensors (the original's        |
|                    | `StubDropout2d`), `nn.Dropout(rate)` on flat ones                  |
| `flatten`          | `torch.flatten(x, 1)`                                              |
| `softmax`          | identity when it produces the graph's output (the module returns   |
|                    | logits; `nn.CrossEntropyLoss` applies log-softmax itself, and      |
|                    | arg-max accuracy is unchanged); `softmax(dim=1)` anywhere else     |

The `dropout` argument (a trial hyper-parameter) inserts `nn.Dropout(dropout)` on the input of the
classifier, the dense layer that produces the output (possibly through softmax/dropout layers).
`num_classes`, when given and different from the graph's output units, resizes that classifier
(see `resize_classifier`, which returns the graph the module really computes: count FLOPs on it).

The module holds no device- or dtype-specific state beyond its parameters: `.to(device)`,
DDP and autocast work unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from aiperf_runner.spec.graph import Graph, GraphError, Layer

__all__ = ["GraphModule", "build_module", "classifier_index", "resize_classifier"]

# Layers that pass the classifier's output through to the graph's output unchanged in shape.
_PASS_THROUGH = ("softmax", "dropout")


def classifier_index(graph: Graph) -> int | None:
    """Index of the dense layer producing the graph's output (through softmax/dropout), or None."""
    producer = graph.producer()
    node = graph.output_node
    while node in producer:
        layer = graph.layers[producer[node]]
        if layer.type == "dense":
            return producer[node]
        if layer.type not in _PASS_THROUGH:
            return None
        node = layer.inputs[0]
    return None


def resize_classifier(graph: Graph, num_classes: int) -> Graph:
    """A copy of `graph` whose classifier outputs `num_classes` units (shapes downstream updated).

    Returns the graph itself (not a copy) when it already has that many output units.
    Raises GraphError when the graph has no dense classifier to resize.
    """
    num_classes = int(num_classes)
    if num_classes < 1:
        raise GraphError(f"num_classes must be >= 1, got {num_classes}")
    out = graph.output_node
    if tuple(graph.nodes[out]) == (num_classes,):
        return graph
    idx = classifier_index(graph)
    if idx is None:
        raise GraphError(f"cannot set num_classes={num_classes}: the graph's output (node {out}, shape "
                         f"{list(graph.nodes[out])}) is not produced by a dense classifier")
    g = graph.copy()
    old = g.layers[idx]
    g.layers[idx] = Layer(old.type, old.inputs, old.output, {**old.params, "units": num_classes})
    # Walk from the classifier's output to the graph's output: every node on the way is (classes,).
    consumers = g.consumers()
    node = old.output
    while True:
        g.nodes[node] = (num_classes,)
        nxt = [j for j in consumers.get(node, []) if g.layers[j].type in _PASS_THROUGH]
        if not nxt:
            break
        node = g.layers[nxt[0]].output
    g.validate()
    return g


class GraphModule(nn.Module):
    """Executes a validated graph. `layers[str(i)]` holds the parameters of graph layer i."""

    def __init__(self, graph: Graph, dropout: float = 0.0) -> None:
        super().__init__()
        graph.validate()
        self.graph_json = graph.to_json()  # plain data: picklable, for reference and debugging
        self.order: list[int] = graph.topological_order()
        self.input_node = graph.input_node
        self.output_node = graph.output_node
        self.specs: list[tuple[str, tuple[int, ...], int, dict[str, Any]]] = [
            (x.type, tuple(x.inputs), x.output, dict(x.params)) for x in graph.layers]
        self.layers = nn.ModuleDict()
        for i, layer in enumerate(graph.layers):
            mod = self._make(layer, graph.nodes[layer.inputs[0]])
            if mod is not None:
                self.layers[str(i)] = mod
        # Softmax that produces the output: identity (the module returns logits).
        self.identity_softmax = {i for i, x in enumerate(graph.layers)
                                 if x.type == "softmax" and x.output == self.output_node}
        # Optional classifier dropout (hyper-parameter).
        self.classifier = classifier_index(graph)
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.classifier_dropout = nn.Dropout(float(dropout)) if dropout > 0 and self.classifier is not None else None
        # How many layers read each node: lets forward() drop tensors it no longer needs.
        uses: dict[int, int] = {}
        for x in graph.layers:
            for n in x.inputs:
                uses[n] = uses.get(n, 0) + 1
        self.uses = uses

    @staticmethod
    def _make(layer: Layer, in_shape: tuple[int, ...]) -> nn.Module | None:
        t, p = layer.type, layer.params
        if t == "conv2d":
            return nn.Conv2d(int(p["in_channels"]), int(p["filters"]), int(p["kernel_size"]),
                             stride=int(p["stride"]), padding=int(p["padding"]), bias=False)
        if t == "dense":
            return nn.Linear(int(p["in_units"]), int(p["units"]))
        if t == "batchnorm2d":
            return nn.BatchNorm2d(int(p["num_features"]))
        if t == "dropout":
            return nn.Dropout2d(float(p["rate"])) if len(in_shape) == 3 else nn.Dropout(float(p["rate"]))
        return None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values: dict[int, torch.Tensor] = {self.input_node: x}
        remaining = dict(self.uses)
        for i in self.order:
            t, inputs, output, p = self.specs[i]
            args = [values[n] for n in inputs]
            for n in inputs:  # free what no later layer reads
                remaining[n] -= 1
                if remaining[n] == 0 and n != self.output_node:
                    del values[n]
            a = args[0]
            if t in ("conv2d", "batchnorm2d", "dropout"):
                y = self.layers[str(i)](a)
            elif t == "dense":
                if self.classifier_dropout is not None and i == self.classifier:
                    a = self.classifier_dropout(a)
                y = self.layers[str(i)](a)
            elif t == "relu":
                y = F.relu(a)
            elif t == "maxpool2d":
                y = F.max_pool2d(a, int(p["kernel_size"]), int(p["stride"]), int(p["padding"]))
            elif t == "avgpool2d":
                y = F.avg_pool2d(a, int(p["kernel_size"]), int(p["stride"]), int(p["padding"]))
            elif t == "global_avgpool2d":
                y = a.mean(dim=(2, 3))
            elif t == "add":
                y = args[0] + args[1]
            elif t == "concat":
                y = torch.cat(args, dim=1)
            elif t == "flatten":
                y = torch.flatten(a, 1)
            elif t == "softmax":
                y = a if i in self.identity_softmax else torch.softmax(a, dim=1)
            else:  # pragma: no cover - validate() rejects unknown types
                raise GraphError(f"layer {i}: unknown layer type {t!r}")
            values[output] = y
        return values[self.output_node]

    def extra_repr(self) -> str:
        return f"layers={len(self.specs)}, input_node={self.input_node}, output_node={self.output_node}"


def build_module(graph: Graph, num_classes: int | None = None, dropout: float = 0.0) -> GraphModule:
    """Build a torch module computing `graph` (validated first; GraphError names a bad layer).

    num_classes: resize the classifier when it differs from the graph's output units.
    dropout: rate of an extra `nn.Dropout` on the classifier's input (0 = none).
    """
    graph.validate()
    if num_classes is not None:
        graph = resize_classifier(graph, num_classes)
    return GraphModule(graph, dropout=dropout)
