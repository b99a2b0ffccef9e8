"""What the fuzzing of the graph reader found (tests/fuzz/test_run_files.py), each as a plain test (<1 s)."""

from __future__ import annotations

import time

import pytest
from aiperf_runner.spec import graph, runio


@pytest.mark.parametrize("raw", [
    b'{"format":"aiperf-graph/1","nodes":[[Infinity]],"layers":[]}',  # OverflowError escaped from_json
    b'{"layer_list":[[0,["StubReLU",0,1]]],"node_list":[[0,[NaN,1,1]],[1,[1,1,1]]]}',
    b'{"node_list":[[0,[1,1,1]],[1,[1,1,1]]],"layer_list":[[0,["StubPooling2d",0,1,0]]]}',  # ZeroDivisionError
    b'{"format":"aiperf-graph/1","nodes":[[3,8,8],[3,8,8]],"layers":[{"type":"maxpool2d","inputs":[0],'
    b'"output":1,"params":{"kernel_size":Infinity,"stride":1,"padding":0}}]}',
])
def test_malformed_numbers_are_graph_errors(raw):
    import json

    with pytest.raises(graph.GraphError):
        graph.Graph.from_json(json.loads(raw)).validate()
    arch_hash, error, *_ = runio._analyse(raw, [("v2", 3), ("v1-compat", 3)], True)
    assert arch_hash is None and error


def test_a_forged_pooling_kernel_does_not_hang():
    """The reference format's pooling padding was searched one value at a time up to kernel/2."""
    data = {"node_list": [[0, [8, 8, 3]], [1, [9, 9, 3]]], "layer_list": [[0, ["StubPooling2d", 0, 1, 10**18, 1]]]}
    started = time.monotonic()
    g = graph.Graph.from_json(data)
    g.validate()  # the padding that reproduces 8 -> 9 exists (the search would have found it, in years)
    assert time.monotonic() - started < 0.5
    assert g.layers[0].params["padding"] == 5 * 10**17


def test_the_padding_that_reproduces_the_stored_shape_is_still_found():
    """ResNet-50's stem pool (kernel 3, stride 2, stored padding 0) maps 112 to 56 with padding 1."""
    data = {"node_list": [[0, [112, 112, 64]], [1, [56, 56, 64]]], "layer_list": [[0, ["StubPooling2d", 0, 1, 3, 2, 0]]]}
    g = graph.Graph.from_json(data)
    assert g.layers[0].params["padding"] == 1
    g.validate()
