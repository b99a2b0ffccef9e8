"""The log format is versioned for real: what the schema accepts (spec/schema.py `fingerprint`) is one of the
schemas recorded for SPEC_VERSION (tests/golden/log_schema_versions.json). A change to it fails here until it is
recorded as compatible with that version (old logs stay valid: a new optional field, a new event type) or
SPEC_VERSION is raised."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from aiperf_runner.spec import SPEC_VERSION, schema
from aiperf_runner.spec.fields import Field

RECORDED = Path(__file__).parents[1] / "golden" / "log_schema_versions.json"


def test_the_schema_is_one_recorded_for_its_spec_version() -> None:
    recorded = json.loads(RECORDED.read_text())
    assert SPEC_VERSION in recorded, f"spec version {SPEC_VERSION} has no schema recorded in {RECORDED}"
    known = [entry["fingerprint"] for entry in recorded[SPEC_VERSION]]
    assert schema.fingerprint() in known, (
        f"the log schema changed (fingerprint {schema.fingerprint()}) while SPEC_VERSION stayed {SPEC_VERSION!r}: "
        f"if every log the recorded schema accepted is still accepted, record it in {RECORDED.name} with the "
        "reason; if not, raise SPEC_VERSION (docs/log-format.md, 'Versions of the format')")


def _without_field(event: str, name: str) -> None:
    et = schema.EVENTS[event]
    schema.EVENTS[event] = dataclasses.replace(et, fields=tuple(f for f in et.fields if f.name != name))


def test_what_the_schema_accepts_moves_the_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    before = schema.fingerprint()
    monkeypatch.setattr(schema, "EVENTS", dict(schema.EVENTS))
    et = schema.EVENTS["run_started"]
    schema.EVENTS["run_started"] = dataclasses.replace(
        et, fields=tuple(dataclasses.replace(f, doc=f.doc + " (reworded)", expects=f.expects + "!") for f in et.fields),
        doc="reworded")
    assert schema.fingerprint() == before  # the words of the documentation and the messages do not count
    _without_field("run_started", "precision")  # the change that went unversioned once
    assert schema.fingerprint() != before
    monkeypatch.setitem(schema.EVENTS, "run_started", et)
    assert schema.fingerprint() == before
    field = Field("note", "type(v) is str", "a string", required=False)
    monkeypatch.setitem(schema.EVENTS, "run_resumed", dataclasses.replace(
        schema.EVENTS["run_resumed"], fields=(*schema.EVENTS["run_resumed"].fields, field)))
    assert schema.fingerprint() != before  # compatible, but recorded too
