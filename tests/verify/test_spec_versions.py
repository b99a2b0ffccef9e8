"""The log format is versioned for real: what each released spec version's schema accepts (spec/schema.py
`Schema.fingerprint`) is one of the schemas recorded for it (tests/golden/log_schema_versions.json). A change to
it fails here until it is recorded as compatible with that version (old logs stay valid: a new optional field, a
new event type) or SPEC_VERSION is raised."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from aiperf_runner.spec import SPEC_VERSION, SPEC_VERSIONS, schema
from aiperf_runner.spec.fields import Field

RECORDED = Path(__file__).parents[1] / "golden" / "log_schema_versions.json"


def test_every_released_spec_version_has_a_schema_and_the_last_is_written() -> None:
    assert tuple(schema.SCHEMAS) == SPEC_VERSIONS and SPEC_VERSIONS[-1] == SPEC_VERSION
    assert schema.CURRENT is schema.SCHEMAS[SPEC_VERSION] and schema.CURRENT.events == schema.EVENTS


@pytest.mark.parametrize("version", SPEC_VERSIONS)
def test_each_schema_is_one_recorded_for_its_spec_version(version: str) -> None:
    recorded = json.loads(RECORDED.read_text())
    assert version in recorded, f"spec version {version} has no schema recorded in {RECORDED}"
    known = [entry["fingerprint"] for entry in recorded[version]]
    assert schema.fingerprint(version) in known, (
        f"the log schema of spec {version} changed (fingerprint {schema.fingerprint(version)}): if every log the "
        f"recorded schema accepted is still accepted, record it in {RECORDED.name} with the reason; if not, raise "
        "SPEC_VERSION and keep the old version's schema (docs/log-format.md, 'Versions of the format')")


def _schema(events: dict[str, schema.EventType]) -> schema.Schema:
    return schema.Schema("test", events, schema.RUN_JSON)


def test_what_the_schema_accepts_moves_the_fingerprint() -> None:
    before = _schema(schema.EVENTS).fingerprint()
    assert before == schema.fingerprint(SPEC_VERSION)
    et = schema.EVENTS["run_started"]
    reworded = dataclasses.replace(
        et, fields=tuple(dataclasses.replace(f, doc=f.doc + " (reworded)", expects=f.expects + "!") for f in et.fields),
        doc="reworded")
    # The words of the documentation and the messages do not count.
    assert _schema({**schema.EVENTS, "run_started": reworded}).fingerprint() == before
    # The change that went unversioned once: a field made required (here, its reverse).
    without = dataclasses.replace(et, fields=tuple(f for f in et.fields if f.name != "precision"))
    assert _schema({**schema.EVENTS, "run_started": without}).fingerprint() != before
    field = Field("note", "type(v) is str", "a string", required=False)
    resumed = schema.EVENTS["run_resumed"]
    widened = dataclasses.replace(resumed, fields=(*resumed.fields, field))
    assert _schema({**schema.EVENTS, "run_resumed": widened}).fingerprint() != before  # compatible, but recorded too


def test_spec_1_reads_both_shapes_its_runners_wrote_and_spec_2_requires_the_rules_version() -> None:
    first = {"type": "run_started", "run_id": "a" * 32, "preset": "smoke", "rules": "v2", "slots": 2,
             "runner_version": "0.1.0", "spec_version": "1"}  # the runner of 1 December
    later = {**first, "precision": "fp32", "devices_per_slot": 1, "dataset": {}}  # rules 2.0 to 3.1
    v1, v2 = schema.SCHEMAS["1"], schema.SCHEMAS["2"]
    assert v1.valid(first) and v1.valid(later) and v1.problem(first) is None
    assert not v2.valid(later) and v2.problem(later) == "run_started: missing field 'rules_version'"
    assert v2.valid({**later, "spec_version": "2", "rules_version": "3.1"})
    assert v1.problem({**later, "precision": 16}) == "run_started: field 'precision' is 16, expected a string"
    assert schema.for_version("1") is v1 and schema.for_version("2") is v2 and schema.for_version("9") is v2
