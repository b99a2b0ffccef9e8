"""Architecture graphs: tensors as nodes, layers as edges, with validation and a content hash.

Also reads and writes the original AIPerf/NNI graph format (`layer_list` / `node_list`).
Shapes are channels-first without the batch axis: (C, H, W) or (units,).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiperf_runner.spec.errors import AiperfError

FORMAT = "aiperf-graph/1"

Shape = tuple[int, ...]

# type -> required parameter names
LAYER_PARAMS: dict[str, tuple[str, ...]] = {
    "conv2d": ("in_channels", "filters", "kernel_size", "stride", "padding"),
    "dense": ("in_units", "units"),
    "batchnorm2d": ("num_features",),
    "relu": (),
    "maxpool2d": ("kernel_size", "stride", "padding"),
    "avgpool2d": ("kernel_size", "stride", "padding"),
    "global_avgpool2d": (),
    "add": (),
    "concat": (),
    "dropout": ("rate",),
    "flatten": (),
    "softmax": (),
}
LAYER_TYPES = frozenset(LAYER_PARAMS)
_MULTI_INPUT = {"add", "concat"}


class GraphError(AiperfError, ValueError):
    """An invalid graph; the message names the offending layer or node."""


@dataclass(frozen=True)
class Layer:
    type: str
    inputs: tuple[int, ...]
    output: int
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "inputs": list(self.inputs), "output": self.output,
                "params": dict(self.params)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Layer:
        return cls(str(data["type"]), tuple(_integer(i) for i in data["inputs"]), _integer(data["output"]),
                   dict(data.get("params") or {}))


def _integer(value: Any) -> int:
    """An integer of a graph file: an int, or a float with an integer value (not a bool, NaN or infinite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (
            float("inf"), float("-inf")) or int(value) != value:
        raise GraphError(f"{value!r} is not an integer")
    return int(value)


def _pooled(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def infer_shape(layer: Layer, in_shapes: Sequence[Shape], where: str = "layer") -> Shape:
    """Output shape of `layer` given its input shapes; GraphError if they do not fit."""
    t, p = layer.type, layer.params
    if t not in LAYER_TYPES:
        raise GraphError(f"{where}: unknown layer type {t!r}")
    missing = [k for k in LAYER_PARAMS[t] if k not in p]
    if missing:
        raise GraphError(f"{where} ({t}): missing parameter(s) {', '.join(missing)}")
    n_in = len(in_shapes)
    if t in _MULTI_INPUT:
        if n_in < 2 or (t == "add" and n_in != 2):
            raise GraphError(f"{where} ({t}): needs {'2' if t == 'add' else '2 or more'} inputs, got {n_in}")
    elif n_in != 1:
        raise GraphError(f"{where} ({t}): needs 1 input, got {n_in}")
    x = in_shapes[0]
    image = len(x) == 3

    def need_image() -> None:
        if not image:
            raise GraphError(f"{where} ({t}): needs a (C, H, W) input, got {list(x)}")

    if t == "conv2d":
        need_image()
        if p["in_channels"] != x[0]:
            raise GraphError(f"{where} (conv2d): in_channels {p['in_channels']} but input has {x[0]} channels")
        for k in ("filters", "kernel_size", "stride"):
            if int(p[k]) < 1:
                raise GraphError(f"{where} (conv2d): {k} must be >= 1")
        if int(p["padding"]) < 0:
            raise GraphError(f"{where} (conv2d): padding must be >= 0")
        h = _pooled(x[1], p["kernel_size"], p["stride"], p["padding"])
        w = _pooled(x[2], p["kernel_size"], p["stride"], p["padding"])
        if h < 1 or w < 1:
            raise GraphError(f"{where} (conv2d): output would be empty for input {list(x)}")
        return (int(p["filters"]), h, w)
    if t == "dense":
        if len(x) != 1:
            raise GraphError(f"{where} (dense): needs a flat input, got {list(x)}")
        if p["in_units"] != x[0]:
            raise GraphError(f"{where} (dense): in_units {p['in_units']} but input has {x[0]} units")
        if int(p["units"]) < 1:
            raise GraphError(f"{where} (dense): units must be >= 1")
        return (int(p["units"]),)
    if t == "batchnorm2d":
        need_image()
        if p["num_features"] != x[0]:
            raise GraphError(f"{where} (batchnorm2d): num_features {p['num_features']} but input has {x[0]} channels")
        return x
    if t in ("maxpool2d", "avgpool2d"):
        need_image()
        for k in ("kernel_size", "stride"):
            if int(p[k]) < 1:
                raise GraphError(f"{where} ({t}): {k} must be >= 1")
        if int(p["padding"]) < 0:
            raise GraphError(f"{where} ({t}): padding must be >= 0")
        if p["padding"] * 2 > p["kernel_size"]:
            raise GraphError(f"{where} ({t}): padding must be at most half the kernel size")
        h = _pooled(x[1], p["kernel_size"], p["stride"], p["padding"])
        w = _pooled(x[2], p["kernel_size"], p["stride"], p["padding"])
        if h < 1 or w < 1:
            raise GraphError(f"{where} ({t}): output would be empty for input {list(x)}")
        return (x[0], h, w)
    if t == "global_avgpool2d":
        need_image()
        return (x[0],)
    if t == "add":
        if in_shapes[0] != in_shapes[1]:
            raise GraphError(f"{where} (add): input shapes differ: {list(in_shapes[0])} and {list(in_shapes[1])}")
        return x
    if t == "concat":
        if any(len(s) != 3 or s[1:] != x[1:] for s in in_shapes):
            raise GraphError(f"{where} (concat): inputs must share H and W: {[list(s) for s in in_shapes]}")
        return (sum(s[0] for s in in_shapes), x[1], x[2])
    if t == "dropout":
        if not 0 <= float(p["rate"]) < 1:
            raise GraphError(f"{where} (dropout): rate must be in [0, 1)")
        return x
    if t == "flatten":
        return (math.prod(x),)
    return x  # relu, softmax


@dataclass
class Graph:
    """An architecture: `nodes[i]` is the shape of tensor i; layers map input tensors to an output."""

    nodes: list[Shape]
    layers: list[Layer]

    # ---- structure -------------------------------------------------------------------------
    @property
    def input_node(self) -> int:
        produced = {layer.output for layer in self.layers}
        sources = [i for i in range(len(self.nodes)) if i not in produced]
        if len(sources) != 1:
            raise GraphError(f"graph must have exactly one input node, found {sources}")
        return sources[0]

    @property
    def output_node(self) -> int:
        consumed = {i for layer in self.layers for i in layer.inputs}
        sinks = [i for i in range(len(self.nodes)) if i not in consumed]
        if len(sinks) != 1:
            raise GraphError(f"graph must have exactly one output node, found {sinks}")
        return sinks[0]

    @property
    def input_shape(self) -> Shape:
        return self.nodes[self.input_node]

    def producer(self) -> dict[int, int]:
        """node id -> index of the layer that produces it."""
        return {layer.output: i for i, layer in enumerate(self.layers)}

    def consumers(self) -> dict[int, list[int]]:
        """node id -> indices of the layers that read it."""
        out: dict[int, list[int]] = {i: [] for i in range(len(self.nodes))}
        for i, layer in enumerate(self.layers):
            for n in layer.inputs:
                out.setdefault(n, []).append(i)
        return out

    def topological_order(self) -> list[int]:
        """Layer indices such that every layer comes after the producers of its inputs."""
        producer = self.producer()
        consumers = self.consumers()
        pending = [sum(1 for n in layer.inputs if n in producer) for layer in self.layers]
        ready = [i for i, c in enumerate(pending) if c == 0]
        order: list[int] = []
        while ready:
            ready.sort()
            i = ready.pop(0)
            order.append(i)
            for j in consumers.get(self.layers[i].output, []):
                pending[j] -= 1
                if pending[j] == 0:
                    ready.append(j)
        if len(order) != len(self.layers):
            stuck = sorted(set(range(len(self.layers))) - set(order))
            raise GraphError(f"graph has a cycle through layer {stuck[0]} ({self.layers[stuck[0]].type})")
        return order

    # ---- validation --------------------------------------------------------------------
    def validate(self) -> None:
        """Raise GraphError naming the first problem: ids, producers, cycles, shapes (and nothing else:
        a parameter that is no number, or an infinite one, is a GraphError too)."""
        try:
            self._validate()
        except GraphError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, ArithmeticError) as exc:
            raise GraphError(f"invalid layer parameters ({type(exc).__name__}: {exc})") from None

    def _validate(self) -> None:
        if not self.nodes:
            raise GraphError("graph has no nodes")
        n = len(self.nodes)
        seen_out: dict[int, int] = {}
        for i, layer in enumerate(self.layers):
            where = f"layer {i}"
            for node in (*layer.inputs, layer.output):
                if not 0 <= node < n:
                    raise GraphError(f"{where} ({layer.type}): node {node} does not exist")
            if layer.output in layer.inputs:
                raise GraphError(f"{where} ({layer.type}): reads its own output node {layer.output}")
            if layer.output in seen_out:
                raise GraphError(f"{where} ({layer.type}): node {layer.output} is already produced by layer {seen_out[layer.output]}")
            seen_out[layer.output] = i
        self.input_node  # noqa: B018 - raises if not exactly one
        self.output_node  # noqa: B018
        for i in self.topological_order():
            layer = self.layers[i]
            shape = infer_shape(layer, [self.nodes[k] for k in layer.inputs], where=f"layer {i}")
            if tuple(self.nodes[layer.output]) != shape:
                raise GraphError(f"layer {i} ({layer.type}): output node {layer.output} has shape "
                                 f"{list(self.nodes[layer.output])} but the layer produces {list(shape)}")

    # ---- building ---------------------------------------------------------------------------
    def add_layer(self, type: str, inputs: Sequence[int], **params: Any) -> int:
        """Append a layer with a new output node (shape inferred); return the new node id."""
        layer = Layer(type, tuple(inputs), len(self.nodes), params)
        shape = infer_shape(layer, [self.nodes[k] for k in inputs], where=f"layer {len(self.layers)}")
        self.nodes.append(shape)
        self.layers.append(layer)
        return layer.output

    def copy(self) -> Graph:
        return Graph(list(self.nodes), [Layer(x.type, x.inputs, x.output, dict(x.params)) for x in self.layers])

    # ---- native JSON, canonical form, hash ----------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "nodes": [list(s) for s in self.nodes],
                "layers": [layer.to_json() for layer in self.layers]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Graph:
        """Read native or reference format (auto-detected); does not validate.

        Raises GraphError, and only that, for anything malformed: a missing field, a value of the
        wrong type, a number that is not an integer (NaN and Infinity included, which `json.loads`
        accepts: found by tests/fuzz/test_run_files.py, an OverflowError that stopped verification).
        """
        if not isinstance(data, Mapping):
            raise GraphError(f"a graph is a JSON object, not {type(data).__name__}")
        try:
            if "layer_list" in data:
                return from_reference(data)
            if data.get("format") != FORMAT:
                raise GraphError(f"unknown graph format {data.get('format')!r} (expected {FORMAT!r} or the AIPerf "
                                 "layer_list format)")
            return cls([tuple(_integer(v) for v in s) for s in data["nodes"]],
                       [Layer.from_json(x) for x in data["layers"]])
        except GraphError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, ArithmeticError) as exc:
            raise GraphError(f"malformed graph JSON ({type(exc).__name__}: {exc})") from None

    def canonical(self) -> dict[str, Any]:
        """The graph with layers in a deterministic topological order and nodes renumbered."""
        producer = self.producer()
        consumers = self.consumers()
        new_id = {self.input_node: 0}
        pending = [sum(1 for n in layer.inputs if n in producer) for layer in self.layers]
        ready = {i for i, c in enumerate(pending) if c == 0}
        nodes = [list(self.nodes[self.input_node])]
        layers: list[dict[str, Any]] = []
        while ready:
            def key(i: int) -> str:
                layer = self.layers[i]
                ins = [new_id[k] for k in layer.inputs]
                if layer.type == "add":
                    ins.sort()  # a + b == b + a; concat order is meaningful
                return json.dumps([ins, layer.type, dict(layer.params)], sort_keys=True)
            i = min(ready, key=key)
            ready.discard(i)
            layer = self.layers[i]
            new_id[layer.output] = len(nodes)
            nodes.append(list(self.nodes[layer.output]))
            ins = [new_id[k] for k in layer.inputs]
            if layer.type == "add":
                ins.sort()
            layers.append({"type": layer.type, "inputs": ins, "output": new_id[layer.output],
                           "params": dict(layer.params)})
            for j in consumers.get(layer.output, []):
                pending[j] -= 1
                if pending[j] == 0:
                    ready.add(j)
        if len(layers) != len(self.layers):
            raise GraphError("graph has a cycle or unreachable layers")
        return {"format": FORMAT, "nodes": nodes, "layers": layers}

    def canonical_json(self) -> str:
        return json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))

    def hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))


def load_graph(path: str) -> Graph:
    with open(path, encoding="utf-8") as fh:
        return Graph.from_json(json.load(fh))


# ---- reference (AIPerf / NNI) format ---------------------------------------------------------

_REF_TO_NATIVE = {
    "StubConv2d": "conv2d", "StubDense": "dense", "StubBatchNormalization2d": "batchnorm2d",
    "StubReLU": "relu", "StubPooling2d": "maxpool2d", "StubAvgPooling2d": "avgpool2d",
    "StubGlobalPooling2d": "global_avgpool2d", "StubAdd": "add", "StubConcatenate": "concat",
    "StubDropout2d": "dropout", "StubFlatten": "flatten", "StubSoftmax": "softmax",
}
_NATIVE_TO_REF = {v: k for k, v in _REF_TO_NATIVE.items()}


def _chw(hwc: Sequence[int]) -> Shape:
    return (int(hwc[2]), int(hwc[0]), int(hwc[1])) if len(hwc) == 3 else tuple(int(v) for v in hwc)


def _hwc(chw: Sequence[int]) -> list[int]:
    return [chw[1], chw[2], chw[0]] if len(chw) == 3 else list(chw)


def from_reference(data: Mapping[str, Any]) -> Graph:
    """Read the original AIPerf graph JSON (`layer_list` / `node_list`, channels-last shapes).

    The original stores pooling padding that does not reproduce its own node shapes (ResNet-50's
    stem pool says padding 0 but outputs 56x56 from 112x112); the padding that reproduces the
    stored output shape is taken instead. The v1-compat profiler never reads pooling padding.
    """
    node_by_id = {int(nid): _chw(shape) for nid, shape in data["node_list"]}
    ids = sorted(node_by_id)
    index = {nid: i for i, nid in enumerate(ids)}
    nodes = [node_by_id[nid] for nid in ids]
    layers: list[Layer] = []
    for _lid, spec in data["layer_list"]:
        kind, src, dst, *args = spec
        if kind not in _REF_TO_NATIVE:
            raise GraphError(f"reference layer {_lid}: unknown type {kind!r}")
        t = _REF_TO_NATIVE[kind]
        inputs = tuple(index[int(s)] for s in (src if isinstance(src, list) else [src]))
        names = LAYER_PARAMS[t]
        if t == "dense" and len(args) >= 2:
            params = {"in_units": int(args[0]), "units": int(args[1])}
        else:
            params = {k: (float(v) if k == "rate" else int(v)) for k, v in zip(names, args, strict=False)}  # type: ignore[misc]
        if t in ("maxpool2d", "avgpool2d"):
            params = _fit_pool_padding(params, nodes[inputs[0]], nodes[index[int(dst)]])
        layers.append(Layer(t, inputs, index[int(dst)], params))
    return Graph(nodes, layers)


def _fit_pool_padding(params: dict[str, Any], x: Shape, y: Shape) -> dict[str, Any]:
    k, s = params.get("kernel_size", 2), params.get("stride", params.get("kernel_size", 2))
    params = {"kernel_size": k, "stride": s, "padding": params.get("padding", 0)}
    if len(x) == 3 and len(y) == 3 and s >= 1 and _pooled(x[1], k, s, params["padding"]) != y[1]:
        # The smallest padding in 0..k//2 that gives the stored size, computed rather than searched (the
        # pooled size grows with the padding): a search over a forged kernel of 10^7 hung verification
        # (found by tests/fuzz/test_run_files.py).
        pad = max(0, -(-((y[1] - 1) * s + k - x[1]) // 2))
        if pad <= k // 2 and _pooled(x[1], k, s, pad) == y[1]:
            params["padding"] = pad
    return params


def to_reference(graph: Graph) -> dict[str, Any]:
    """Write the original AIPerf graph JSON (channels-last shapes)."""
    layer_list = []
    adj: dict[str, list[list[int]]] = {str(i): [] for i in range(len(graph.nodes))}
    radj: dict[str, list[list[int]]] = {str(i): [] for i in range(len(graph.nodes))}
    for lid, layer in enumerate(graph.layers):
        src: Any = list(layer.inputs) if layer.type in _MULTI_INPUT else layer.inputs[0]
        args = [layer.params[k] for k in LAYER_PARAMS[layer.type]]
        layer_list.append([lid, [_NATIVE_TO_REF[layer.type], src, layer.output, *args]])
        for n in layer.inputs:
            adj[str(n)].append([layer.output, lid])
            radj[str(layer.output)].append([n, lid])
    return {
        "input_shape": _hwc(graph.input_shape),
        "node_list": [[i, _hwc(s)] for i, s in enumerate(graph.nodes)],
        "layer_list": layer_list,
        "adj_list": adj,
        "reverse_adj_list": radj,
        "layer_id_to_input_node_ids": {str(i): list(x.inputs) for i, x in enumerate(graph.layers)},
        "layer_id_to_output_node_ids": {str(i): [x.output] for i, x in enumerate(graph.layers)},
        "operation_history": [],
        "vis": None,
        "weighted": False,
    }
