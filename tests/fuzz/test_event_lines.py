"""Event log lines (spec/eventlog.py iter_events): any bytes give events or a LogError, nothing else."""

from __future__ import annotations

import tempfile
from pathlib import Path

from aiperf_runner.spec import eventlog
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import bounded, count, fuzz
from tests.fuzz.strategies import JSON, RAW, dumps


def read_all(data: bytes) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        path.write_bytes(data)
        try:
            with bounded("iter_events"):
                return [e.data for e in eventlog.iter_events(path)]
        except eventlog.LogError as exc:
            assert exc.line >= 1 and exc.reason
            return []


@fuzz(300)
@given(st.lists(RAW, max_size=6))
def test_any_lines(lines):
    count("event lines: raw")
    for event in read_all(b"\n".join(lines) + b"\n"):
        assert isinstance(event, dict)


@fuzz(300)
@given(st.lists(st.dictionaries(st.text(max_size=8), JSON, max_size=5), min_size=1, max_size=6))
def test_chained_objects_with_any_fields(objects):
    """Lines that keep the chain (seq, prev) but whose fields, t included, are anything."""
    count("event lines: chained")
    lines, prev = [], eventlog.GENESIS
    for seq, obj in enumerate(objects):
        obj = {**obj, "seq": seq, "prev": prev, "type": obj.get("type", "x"), "t": obj.get("t", 0.0)}
        raw = dumps(obj)
        lines.append(raw)
        prev = eventlog.digest(raw)
    events = read_all(b"\n".join(lines) + b"\n")
    assert all(isinstance(e["t"], (int, float)) for e in events)
