"""run.json, the events' contents and trial graphs (both formats) through the readers and verify():
only the documented errors (RunIOError), and verify() reports everything as checks."""

from __future__ import annotations

import json

from aiperf_runner.spec import eventlog, graph, runio
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import rundir
from tests.fuzz.conftest import bounded, count, fuzz
from tests.fuzz.strategies import RAW, dumps, mutated, native_graph, reference_graph, reference_pooling
from tests.helpers import REPO

RUN_JSON = json.loads((rundir.template() / "run.json").read_text())
EVENTS = [json.loads(line) for line in (rundir.template() / "events.jsonl").read_text().splitlines()]
GRAPH = json.loads((rundir.template() / "trials" / "t0000" / "graph.json").read_text())
# The reference (AIPerf v1, layer_list) format: ResNet-50 as the original wrote it (it has pooling layers).
REFERENCE = json.loads((REPO / "tests" / "data" / "reference_resnet50.json").read_text())


@fuzz(60)
@given(st.one_of(RAW, mutated(RUN_JSON).map(dumps)))
def test_run_json(data):
    count("run.json")
    with rundir.copy() as run:
        (run / "run.json").write_bytes(data)
        try:
            assert isinstance(runio.RunDir(run).run, dict)
        except runio.RunIOError as exc:
            assert "run.json" in str(exc)
        with bounded("verify"):
            rundir.verified(run)


@fuzz(60)
@given(st.integers(min_value=0, max_value=len(EVENTS) - 1), st.data())
def test_event_contents(index, data):
    """One event's fields replaced, dropped or added, the chain made again (as a forger with the key would)."""
    count("events: contents")
    events = [dict(e) for e in EVENTS]
    events[index] = {**data.draw(mutated(events[index])), "seq": index}
    prev, lines = eventlog.GENESIS, []
    for e in events:
        e = {**e, "prev": prev}
        e.setdefault("t", 0.0)
        e.setdefault("type", "x")
        raw = dumps(e)
        lines.append(raw)
        prev = eventlog.digest(raw)
    with rundir.copy() as run:
        (run / "events.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        with bounded("verify"):
            rundir.verified(run)


@fuzz(250)
@given(st.one_of(RAW, mutated(GRAPH).map(dumps), mutated(REFERENCE).map(dumps), native_graph().map(dumps),
                 reference_graph().map(dumps)))
def test_graph_files(data):
    """A trial's graph.json, native or reference (layer_list) format: hashed, or an error string."""
    count("graph.json (native and reference)")
    with rundir.copy() as run:
        (run / "trials" / "t0000" / "graph.json").write_bytes(data)
        with bounded("RunDir.arch"):
            for rules in ("v2", "v1-compat"):
                info = runio.RunDir(run).arch("t0000", (rules, 3))
                assert (info.arch_hash is None) == (info.error is not None), info
        if data[:1] == b"{":
            count("graph.json: verified", detail=True)
            with bounded("verify"):
                rundir.verified(run)


@fuzz(150)
@given(reference_pooling())
def test_pooling_parameters(data):
    """A layer's kernel, stride and padding anything: Graph.from_json answers a Graph or a GraphError, in time."""
    count("graph: layer parameters")
    with bounded("Graph.from_json"):
        try:
            g = graph.Graph.from_json(data)
        except graph.GraphError:
            return
        try:
            g.validate()
        except graph.GraphError:
            pass
