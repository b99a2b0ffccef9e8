"""Hypothesis strategies of outside input: JSON values, JSON-ish text, and mutations of valid files."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=12)


def dumps(value: Any) -> bytes:
    """JSON as Python writes it, NaN and Infinity included (json.loads reads them back)."""
    return json.dumps(value).encode()


# Bytes a reader may be handed: JSON text, JSON with junk around it, or anything.
RAW = st.one_of(JSON.map(dumps), st.binary(max_size=200),
                st.tuples(JSON.map(dumps), st.binary(max_size=8)).map(lambda p: p[0] + p[1]))


# Numbers that break arithmetic and conversions: infinities, NaN, zero, negatives, huge and fractional values.
NASTY = st.sampled_from([float("inf"), float("-inf"), float("nan"), 0, -1, 0.5, 2**63, 2**64 + 1, 1e308, -1e308, True,
                         None, "", "1", [], {}])


def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    """The path of every value inside a JSON document (the document itself included)."""
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*path, index))
    return out


@st.composite
def mutated(draw: st.DrawFn, valid: dict[str, Any]) -> dict[str, Any]:
    """`valid` with one to four of its values, at any depth, replaced (by arbitrary JSON or a nasty
    number), dropped, or given a new sibling."""
    out = json.loads(json.dumps(valid))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = [p for p in _paths(out) if p]
        if not paths:
            break
        *parent_path, last = draw(st.sampled_from(paths))
        parent = out
        for step in parent_path:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "nasty", "drop", "add"]))
        if action == "replace":
            parent[last] = draw(JSON)
        elif action == "nasty":
            parent[last] = draw(NASTY)
        elif action == "drop":
            del parent[last]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(JSON)
        else:
            parent.insert(last, draw(JSON | NASTY))
    return out


# ---- graphs, built from their parts (a mutation of a valid file rarely reaches a layer's parameters) ----
DIM = st.integers(min_value=0, max_value=64) | st.integers(min_value=-2, max_value=2**70) | NASTY
SHAPE = st.lists(DIM, min_size=1, max_size=3)


@st.composite
def native_graph(draw: st.DrawFn) -> dict[str, Any]:
    from aiperf_runner.spec.graph import FORMAT, LAYER_PARAMS

    n = draw(st.integers(min_value=1, max_value=5))
    layers = []
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        kind = draw(st.sampled_from(sorted(LAYER_PARAMS)) | st.text(max_size=6))
        names = LAYER_PARAMS.get(kind, ())
        layers.append({"type": kind, "inputs": draw(st.lists(st.integers(-1, n) | NASTY, min_size=1, max_size=2)),
                       "output": draw(st.integers(-1, n) | NASTY),
                       "params": {k: draw(DIM) for k in names if draw(st.integers(0, 9))}})
    return {"format": FORMAT, "nodes": draw(st.lists(SHAPE, min_size=n, max_size=n)), "layers": layers}


@st.composite
def reference_graph(draw: st.DrawFn) -> dict[str, Any]:
    from aiperf_runner.spec.graph import _REF_TO_NATIVE

    n = draw(st.integers(min_value=1, max_value=5))
    nodes = [[i, draw(st.lists(DIM, min_size=3, max_size=3) | SHAPE)] for i in range(n)]
    layers = []
    for lid in range(draw(st.integers(min_value=0, max_value=4))):
        kind = draw(st.sampled_from(sorted(_REF_TO_NATIVE)) | st.text(max_size=6))
        node = st.integers(0, n - 1)  # mostly existing nodes, so that the layer's own parameters get read
        src = draw(st.one_of(node, st.lists(node, min_size=1, max_size=2), st.integers(-1, n), NASTY))
        layers.append([lid, [kind, src, draw(st.one_of(node, NASTY)), *draw(st.lists(DIM, max_size=5))]])
    return {"layer_list": layers, "node_list": nodes}


@st.composite
def reference_pooling(draw: st.DrawFn) -> dict[str, Any]:
    """One pooling layer between two well-formed nodes: its kernel, stride and padding anything."""
    kind = draw(st.sampled_from(["StubPooling2d", "StubAvgPooling2d", "StubConv2d"]))
    shape = st.lists(st.integers(min_value=1, max_value=256), min_size=3, max_size=3)
    return {"node_list": [[0, draw(shape)], [1, draw(shape)]],
            "layer_list": [[0, [kind, 0, 1, *draw(st.lists(DIM, min_size=1, max_size=5))]]]}
