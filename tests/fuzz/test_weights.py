"""Uploaded weights (train/weights.py, read by the audit, train/reevaluate.py): a safetensors file of the
trial's module, or a ValueError from `load_weights` / a RuntimeError from `load_state_dict`, in time.

Inputs: anything, a valid file cut short or with junk, its JSON header mutated (dtypes, shapes, offsets,
a header length far beyond the file), and well-formed files of other tensors. About 5 s (torch).
"""

from __future__ import annotations

import json
import struct
import tempfile
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import rundir
from tests.fuzz.conftest import bounded, count, fuzz
from tests.fuzz.strategies import RAW, mutated

torch = pytest.importorskip("torch")  # the runner's [train] extra: installed by `make install`


@cache
def module():
    from aiperf_runner.spec.graph import Graph
    from aiperf_runner.train.builder import build_module

    graph = Graph.from_json(json.loads((rundir.template() / "trials" / "t0000" / "graph.json").read_text()))
    return build_module(graph, num_classes=10, dropout=0.0)


@cache
def valid_file() -> bytes:
    from aiperf_runner.train.weights import save_weights

    with tempfile.TemporaryDirectory() as tmp:
        save_weights(module(), Path(tmp) / "w.safetensors")
        return (Path(tmp) / "w.safetensors").read_bytes()


def split(raw: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


@st.composite
def weight_files(draw) -> bytes:
    raw = valid_file()
    header, data = split(raw)
    kind = draw(st.sampled_from(["raw", "cut", "header", "length", "other"]))
    if kind == "raw":
        return draw(RAW)
    if kind == "cut":
        return raw[:draw(st.integers(0, len(raw)))] + draw(st.binary(max_size=16))
    if kind == "header":
        body = json.dumps(draw(mutated(header))).encode()
        return struct.pack("<Q", len(body)) + body + data
    if kind == "length":
        return struct.pack("<Q", draw(st.integers(0, 2**64 - 1))) + raw[8:]
    names = draw(st.lists(st.sampled_from(sorted(header) + ["x"]), min_size=1, max_size=4, unique=True))
    shapes = [draw(st.lists(st.integers(0, 6), max_size=3)) for _ in names]
    from safetensors.torch import save

    return save({n: torch.zeros(s) for n, s in zip(names, shapes, strict=True) if n != "__metadata__"} or
                {"x": torch.zeros(1)})


@fuzz(150)
@given(weight_files())
def test_uploaded_weights(raw):
    from aiperf_runner.train.weights import load_weights

    count("weights (safetensors)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.safetensors"
        path.write_bytes(raw)
        with bounded("load_weights"):
            try:
                state = load_weights(path)
            except ValueError as exc:
                assert "safetensors" in str(exc)
                return
            assert all(isinstance(t, torch.Tensor) for t in state.values())
            try:
                module().load_state_dict(state, strict=True)
            except RuntimeError:
                pass
