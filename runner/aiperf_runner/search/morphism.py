"""Network morphism on spec graphs: deeper, wider, skip.

Each operation takes a valid `Graph` and returns a new, valid graph (the input is not modified) and
a JSON-able description of what it did. The result is valid by construction and, unless
`check=False` (the search's inner loop: no validation, and the result shares the input's
unchanged Layer objects), also checked with `Graph.validate()`. As in the original AIPerf/NNI, layers a morphism creates are
appended at the end of the layer list (the v1-compat FLOP counter visits layers in list order and
charges its kernel-size quirk by position); existing layers keep their positions, only their
inputs (rewiring) or channel parameters (wider) change.

- **deeper** — insert conv3x3-BN-ReLU (same channel count, stride 1) after a ReLU: every former
  consumer of the ReLU's output reads the new ReLU's output instead.
- **wider** — double a conv's filters. Tensors joined by channel-preserving layers (BN, ReLU,
  pooling, dropout, add, global pooling, flatten) must keep equal channel counts, so the whole
  *channel group* of the conv's output is widened consistently: every conv producing into the group
  doubles its filters, every BN in it its num_features, every conv reading from it its in_channels
  and a dense reading from it its in_units. Groups that contain the graph input or touch a concat
  are not widened. A conv whose group it produces alone is a *local* widening.
- **skip** — add-connection from a ReLU to a later BN output: 1x1 conv (stride chosen so the
  spatial sizes match) + BN on the ReLU's output, added to the BN's output; the consumers of the BN
  output read the sum.

`neighbours(graph)` enumerates every applicable morphism; `random_morphism(graph, rng)` picks an
operation uniformly among those applicable and then a target uniformly (cheap: no full skip
enumeration); `apply(graph, morphism)` performs it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.graph import Graph, GraphError, Layer

OPS = ("deeper", "wider", "skip")

# Layers whose output has the channel count of their (first) input.
_CHANNEL_PRESERVING = frozenset({"batchnorm2d", "relu", "maxpool2d", "avgpool2d", "dropout",
                                 "global_avgpool2d", "flatten", "softmax", "add"})


class MorphismError(AiperfError, ValueError):
    """The requested morphism does not apply to this graph (wrong target, no candidates)."""


@dataclass(frozen=True)
class Morphism:
    """One applicable operation. `target`: deeper (relu_node,), wider (conv_layer_index,),
    skip (start_relu_node, end_bn_node)."""

    op: str
    target: tuple[int, ...]


# ---- graph helpers ------------------------------------------------------------------------------

def param_count(graph: Graph) -> int:
    """Trainable parameters as the torch builder makes them (conv without bias, BN affine, dense with bias)."""
    total = 0
    for layer in graph.layers:
        p = layer.params
        if layer.type == "conv2d":
            total += p["in_channels"] * p["filters"] * p["kernel_size"] ** 2
        elif layer.type == "batchnorm2d":
            total += 2 * p["num_features"]
        elif layer.type == "dense":
            total += (p["in_units"] + 1) * p["units"]
    return total


def _consumers(graph: Graph) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, layer in enumerate(graph.layers):
        for n in layer.inputs:
            out.setdefault(n, []).append(i)
    return out


def _redirect(graph: Graph, layer_indices: Iterable[int], old: int, new: int) -> None:
    for i in layer_indices:
        layer = graph.layers[i]
        graph.layers[i] = Layer(layer.type, tuple(new if n == old else n for n in layer.inputs), layer.output,
                                dict(layer.params))


def _descendants(graph: Graph, node: int, consumers: dict[int, list[int]] | None = None) -> set[int]:
    consumers = consumers if consumers is not None else _consumers(graph)
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        for i in consumers.get(n, ()):
            out = graph.layers[i].output
            if out not in seen:
                seen.add(out)
                stack.append(out)
    return seen


def _copy(graph: Graph, deep: bool) -> Graph:
    """Deep copy, or (search inner loop) new lists sharing the immutable Layer objects; morphisms
    never modify a layer in place, they replace it."""
    return graph.copy() if deep else Graph(list(graph.nodes), list(graph.layers))


def _is_image(graph: Graph, node: int) -> bool:
    return len(graph.nodes[node]) == 3


def _relu_nodes(graph: Graph, consumers: dict[int, list[int]]) -> list[int]:
    """Outputs of ReLUs on image tensors that something reads."""
    return [layer.output for layer in graph.layers
            if layer.type == "relu" and _is_image(graph, layer.output) and consumers.get(layer.output)]


def _bn_nodes(graph: Graph) -> list[int]:
    return [layer.output for layer in graph.layers if layer.type == "batchnorm2d"]


def _skip_stride(src: Sequence[int], dst: Sequence[int]) -> int | None:
    """Stride s of a 1x1 conv (padding 0) mapping spatial size src to dst, or None."""
    (_, h, w), (_, h2, w2) = src, dst
    if h2 > h or w2 > w:
        return None
    for s in range(1, max(h, w) + 1):
        if (h - 1) // s + 1 == h2 and (w - 1) // s + 1 == w2:
            return s
    return None


# ---- channel groups (for wider) -----------------------------------------------------------------

def channel_groups(graph: Graph) -> dict[int, int]:
    """node id -> representative of the set of nodes that must keep the same channel count."""
    parent = list(range(len(graph.nodes)))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for layer in graph.layers:
        if layer.type in _CHANNEL_PRESERVING:
            root = find(layer.output)
            for n in layer.inputs:
                r = find(n)
                if r != root:
                    parent[r] = root
    return {n: find(n) for n in range(len(graph.nodes))}


def _blocked_roots(graph: Graph, groups: dict[int, int]) -> set[int]:
    """Channel groups that cannot be widened: they hold the graph input, touch a concat, or are
    produced by a layer that is neither a conv nor channel-preserving (e.g. a dense)."""
    blocked = {groups[graph.input_node]}
    for layer in graph.layers:
        if layer.type == "concat":
            blocked.add(groups[layer.output])
            blocked.update(groups[n] for n in layer.inputs)
        elif layer.type not in _CHANNEL_PRESERVING and layer.type != "conv2d":
            blocked.add(groups[layer.output])
    return blocked


def _wider_plan(graph: Graph, conv_index: int, groups: dict[int, int] | None = None) -> set[int] | None:
    """The node set to widen when doubling conv `conv_index`, or None if it cannot be widened."""
    layer = graph.layers[conv_index]
    if layer.type != "conv2d":
        return None
    groups = groups if groups is not None else channel_groups(graph)
    root = groups[layer.output]
    if root in _blocked_roots(graph, groups):
        return None
    return {n for n, r in groups.items() if r == root}


def widenable_convs(graph: Graph, max_filters: int | None = None) -> list[int]:
    groups = channel_groups(graph)
    blocked = _blocked_roots(graph, groups)
    return [i for i, layer in enumerate(graph.layers)
            if layer.type == "conv2d" and groups[layer.output] not in blocked
            and (max_filters is None or 2 * layer.params["filters"] <= max_filters)]


# ---- the three operations -----------------------------------------------------------------------

def deeper(graph: Graph, relu_node: int | None = None, rng: random.Random | None = None,
           kernel_size: int = 3, check: bool = True) -> tuple[Graph, dict[str, Any]]:
    """Insert conv(kernel_size)-BN-ReLU after the ReLU producing `relu_node` (random if None)."""
    consumers = _consumers(graph)
    candidates = _relu_nodes(graph, consumers)
    if relu_node is None:
        if not candidates:
            raise MorphismError("deeper: the graph has no ReLU to deepen after")
        relu_node = (rng or random).choice(candidates)
    elif relu_node not in candidates:
        raise MorphismError(f"deeper: node {relu_node} is not the output of a ReLU on an image tensor")
    g = _copy(graph, check)
    readers = list(consumers[relu_node])
    channels = g.nodes[relu_node][0]
    position = len(g.layers)
    x = g.add_layer("conv2d", [relu_node], in_channels=channels, filters=channels, kernel_size=kernel_size,
                    stride=1, padding=kernel_size // 2)
    x = g.add_layer("batchnorm2d", [x], num_features=channels)
    x = g.add_layer("relu", [x])
    _redirect(g, readers, relu_node, x)
    if check:
        g.validate()
    return g, {"op": "deeper", "after_node": relu_node, "filters": channels, "kernel_size": kernel_size,
               "new_layers": [position, position + 1, position + 2]}


def wider(graph: Graph, conv_index: int | None = None, rng: random.Random | None = None,
          max_filters: int | None = None, check: bool = True) -> tuple[Graph, dict[str, Any]]:
    """Double the filters of conv layer `conv_index` (random widenable conv if None), widening its
    whole channel group consistently."""
    if conv_index is None:
        candidates = widenable_convs(graph, max_filters)
        if not candidates:
            raise MorphismError("wider: no conv can be widened")
        conv_index = (rng or random).choice(candidates)
    if not 0 <= conv_index < len(graph.layers):
        raise MorphismError(f"wider: no layer {conv_index}")
    members = _wider_plan(graph, conv_index)
    if members is None:
        raise MorphismError(f"wider: layer {conv_index} ({graph.layers[conv_index].type}) cannot be widened")
    old = graph.layers[conv_index].params["filters"]
    new = 2 * old
    if max_filters is not None and new > max_filters:
        raise MorphismError(f"wider: {new} filters would exceed {max_filters}")
    g = _copy(graph, check)
    for n in members:
        shape = g.nodes[n]
        g.nodes[n] = (shape[0] * 2, *shape[1:])
    changed: list[int] = []
    producers: list[int] = []
    for i, layer in enumerate(g.layers):
        params = dict(layer.params)
        if layer.type == "conv2d":
            if layer.output in members:
                params["filters"] = new
                producers.append(i)
            if layer.inputs[0] in members:
                params["in_channels"] = g.nodes[layer.inputs[0]][0]
        elif layer.type == "batchnorm2d" and layer.output in members:
            params["num_features"] = new
        elif layer.type == "dense" and layer.inputs[0] in members:
            params["in_units"] = g.nodes[layer.inputs[0]][0]
        if params != layer.params:
            g.layers[i] = Layer(layer.type, layer.inputs, layer.output, params)
            changed.append(i)
    if check:
        g.validate()
    return g, {"op": "wider", "conv": conv_index, "from": old, "to": new, "producers": producers,
               "changed_layers": changed, "local": len(producers) == 1}


def skip(graph: Graph, start: int | None = None, end: int | None = None,
         rng: random.Random | None = None, check: bool = True) -> tuple[Graph, dict[str, Any]]:
    """Add-connection from ReLU output `start` to a later BN output `end` through 1x1 conv (+stride) + BN.

    With start/end None a random valid pair is drawn (a random ReLU that has a reachable BN, then a
    random reachable BN whose spatial size a strided 1x1 conv can produce)."""
    draw = rng or random  # without a generator, the random module (seeded by random.seed)
    consumers = _consumers(graph)
    relus = _relu_nodes(graph, consumers)
    bns = set(_bn_nodes(graph))
    if start is None:
        order = list(relus)
        draw.shuffle(order)
        for s in order:
            ends = [e for e in sorted(_descendants(graph, s, consumers) & bns)
                    if _is_image(graph, e) and _skip_stride(graph.nodes[s], graph.nodes[e])]
            if end is not None:
                ends = [e for e in ends if e == end]
            if ends:
                start = s
                end = draw.choice(ends)
                break
        else:
            raise MorphismError("skip: no ReLU with a later batch norm to connect")
    elif start not in relus:
        raise MorphismError(f"skip: node {start} is not the output of a ReLU on an image tensor")
    if end is None:
        ends = [e for e in sorted(_descendants(graph, start, consumers) & bns)
                if _skip_stride(graph.nodes[start], graph.nodes[e])]
        if not ends:
            raise MorphismError(f"skip: no batch norm after node {start}")
        end = draw.choice(ends)
    if end not in bns:
        raise MorphismError(f"skip: node {end} is not the output of a batch norm")
    if end not in _descendants(graph, start, consumers):
        raise MorphismError(f"skip: node {end} does not come after node {start}")
    stride = _skip_stride(graph.nodes[start], graph.nodes[end])
    if stride is None:
        raise MorphismError(f"skip: no stride maps {list(graph.nodes[start])} to {list(graph.nodes[end])}")
    g = _copy(graph, check)
    readers = list(consumers.get(end, ()))
    position = len(g.layers)
    x = g.add_layer("conv2d", [start], in_channels=g.nodes[start][0], filters=g.nodes[end][0], kernel_size=1,
                    stride=stride, padding=0)
    x = g.add_layer("batchnorm2d", [x], num_features=g.nodes[end][0])
    y = g.add_layer("add", [end, x])
    _redirect(g, readers, end, y)
    if check:
        g.validate()
    return g, {"op": "skip", "from_node": start, "to_node": end, "stride": stride,
               "new_layers": [position, position + 1, position + 2]}


# ---- enumeration and dispatch -------------------------------------------------------------------

def neighbours(graph: Graph, rng: random.Random | None = None, max_filters: int | None = None,
               ops: Sequence[str] = OPS) -> list[Morphism]:
    """Every applicable morphism of `graph` (shuffled when `rng` is given)."""
    consumers = _consumers(graph)
    out: list[Morphism] = []
    relus = _relu_nodes(graph, consumers)
    if "deeper" in ops:
        out += [Morphism("deeper", (r,)) for r in relus]
    if "wider" in ops:
        out += [Morphism("wider", (i,)) for i in widenable_convs(graph, max_filters)]
    if "skip" in ops:
        bns = set(_bn_nodes(graph))
        for s in relus:
            for e in sorted(_descendants(graph, s, consumers) & bns):
                if _skip_stride(graph.nodes[s], graph.nodes[e]):
                    out.append(Morphism("skip", (s, e)))
    if rng is not None:
        rng.shuffle(out)
    return out


def apply(graph: Graph, morphism: Morphism, max_filters: int | None = None) -> tuple[Graph, dict[str, Any]]:
    if morphism.op == "deeper":
        return deeper(graph, morphism.target[0])
    if morphism.op == "wider":
        return wider(graph, morphism.target[0], max_filters=max_filters)
    if morphism.op == "skip":
        return skip(graph, morphism.target[0], morphism.target[1])
    raise MorphismError(f"unknown morphism {morphism.op!r}")


def random_morphism(graph: Graph, rng: random.Random, ops: Sequence[str] = OPS,
                    max_filters: int | None = None, check: bool = True) -> tuple[Graph, dict[str, Any]]:
    """Apply one random morphism: the operation uniformly among `ops` that apply, then a random target.

    Raises MorphismError when none applies."""
    order = list(ops)
    rng.shuffle(order)
    for op in order:
        try:
            if op == "deeper":
                return deeper(graph, rng=rng, check=check)
            if op == "wider":
                return wider(graph, rng=rng, max_filters=max_filters, check=check)
            if op == "skip":
                return skip(graph, rng=rng, check=check)
        except MorphismError:
            continue
    raise MorphismError("no morphism applies to this graph")


__all__ = ["OPS", "Morphism", "MorphismError", "apply", "channel_groups", "deeper", "neighbours", "param_count",
           "random_morphism", "skip", "wider", "widenable_convs", "GraphError"]
