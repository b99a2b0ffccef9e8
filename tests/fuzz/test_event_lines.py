"""Event log lines (spec/eventlog.py iter_events): any bytes give events or a LogError, nothing else."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from aiperf_runner.spec import eventlog, logchunks
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import bounded, count, fuzz
from tests.fuzz.strategies import JSON, NASTY, RAW, dumps


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


EPOCH = {"attempt": 1, "ended_at": 1764000010.5, "epoch": 1, "images_evaluated": 50, "images_trained": 100,
         "seconds": 10.0, "started_at": 1764000000.5, "t": 1764000011.0, "trial": "t0001", "type": "epoch_end",
         "val_accuracy": 0.5, "val_loss": 1.25}


def content(events: object) -> tuple[list[str], tuple[int, str] | None]:
    """The events (as canonical JSON, NaN included) and the LogError, if any."""
    out: list[str] = []
    try:
        for line, data in events:  # type: ignore[attr-defined]
            out.append(f"{line} {json.dumps(data, sort_keys=True)}")
    except eventlog.LogError as exc:
        return out, (exc.line, exc.reason)
    return out, None


@fuzz(300)
@given(st.lists(st.tuples(st.sampled_from(sorted(EPOCH) + ["x", "accelerators"]), st.one_of(JSON, NASTY)),
                max_size=3), st.lists(st.integers(0, 5), min_size=1, max_size=8), st.integers(60, 900))
def test_scanned_chunks_read_as_lines(edits, shape, chunk):
    """The chunked reader (spec/logchunks.py, epochscan.py: plain epochs as columns, dicts rebuilt)
    gives every line, or the first error, as iter_events does, whatever an epoch line's fields hold."""
    count("event lines: scanned")
    lines, prev = [], eventlog.GENESIS
    for seq, k in enumerate(shape):
        obj = dict(EPOCH, epoch=seq + 1)
        if k == 0:  # an edited line: any value in any field (the chain kept)
            for key, value in edits:
                obj[key] = value
        obj.update(seq=seq, prev=prev)
        raw = dumps(obj)
        lines.append(raw)
        prev = eventlog.digest(raw)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        with bounded("iter_records"):
            assert content(logchunks.iter_records(path, workers=1, chunk=chunk)) == content(
                (e.line, e.data) for e in eventlog.iter_events(path))
