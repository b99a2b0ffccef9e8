"""The `epoch_end` record is defined once (spec/records.py `EpochEnd`): the schema's check, the fast
path's decoder (`epochscan.Plain`), its columns (`Columns`) and the dicts it rebuilds (`row_dicts`)
are made from its fields, and a field added to it reaches them all. Lines as the writers write them
(`EpochEnd(...).as_event()`) stay on the fast path.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from aiperf_runner.spec import epochscan, records, schema
from aiperf_runner.spec.eventlog import RESERVED, EventWriter
from aiperf_runner.spec.fields import nonneg, number, obj, string
from aiperf_runner.spec.records import COUNT, NUMBER, EpochEnd, meta

from devdata.runfactory import make_run

REQUIRED, OPTIONAL = records.names(EpochEnd)


def record(**changes: Any) -> EpochEnd:
    """An epoch as train/trial.py writes it (floats where the schema asks for numbers)."""
    fields: dict[str, Any] = {"trial": "t0003", "attempt": 2, "epoch": 5, "images_trained": 50_000,
                              "images_evaluated": 10_000, "val_accuracy": 0.8125, "val_loss": 0.61,
                              "started_at": 1_764_000_100.25, "ended_at": 1_764_000_130.5, "seconds": 30.25}
    return EpochEnd(**{**fields, **changes})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Extended(EpochEnd):
    """EpochEnd with a field of each kind more: what adding a field to the record looks like."""

    grad_norm: float = dataclasses.field(metadata=meta(number("grad_norm"), NUMBER))
    steps: int = dataclasses.field(metadata=meta(nonneg("steps"), COUNT))
    notes: dict[str, Any] | None = dataclasses.field(default=None, metadata=meta(obj("notes", required=False)))


def extended(**changes: Any) -> Extended:
    return Extended(**{**dataclasses.asdict(record()), "grad_norm": 1.5, "steps": 391, **changes})


def line(event: dict[str, Any], seq: int = 7) -> bytes:
    return json.dumps({**event, "seq": seq, "t": event["ended_at"] + 0.25, "type": "epoch_end", "prev": "0" * 64},
                      sort_keys=True, separators=(",", ":")).encode()


# ---- one definition ---------------------------------------------------------------------------------
def test_the_schema_is_the_records() -> None:
    fields = schema.EVENTS["epoch_end"].fields
    assert [f.name for f in fields] == [f.name for f in dataclasses.fields(EpochEnd)]
    assert tuple(f.name for f in fields if f.required) == REQUIRED
    assert tuple(f.name for f in fields if not f.required) == OPTIONAL == ("accelerators", "lr_scaling")


def test_the_fast_path_is_the_records() -> None:
    assert set(epochscan.Plain.__struct_fields__) == set(RESERVED) | set(REQUIRED)
    assert set(epochscan.Columns._fields) == {"offset", "t"} | set(REQUIRED)
    assert set(epochscan.INT_FIELDS) | set(epochscan.FLOAT_FIELDS) == {"t"} | set(REQUIRED) - {"trial"}
    assert epochscan.Columns._fields == ("offset", "trial", *epochscan.INT_FIELDS, *epochscan.FLOAT_FIELDS)


def test_row_dicts_are_the_lines(tmp_path: Path) -> None:
    """`Chunk.row_dicts` rebuilds what `json.loads` reads, keys in the writer's order."""
    log = tmp_path / "events.jsonl"
    with EventWriter(log, durability="none") as w:
        for epoch in (1, 2, 3):
            w.append("epoch_end", **record(epoch=epoch).as_event())
    scan = epochscan.scan_chunk(str(log), 0, log.stat().st_size)
    assert scan.clean and scan.rows is not None
    chunk = epochscan.Chunk(1, scan.lines, "0" * 64, scan.digests, [], [], scan.rows, scan.trials)
    expected = [json.loads(x) for x in log.read_bytes().splitlines()]
    assert chunk.row_dicts() == expected
    assert [list(d) for d in chunk.row_dicts()] == [list(d) for d in expected]


# ---- a field added ----------------------------------------------------------------------------------
def test_an_added_field_reaches_the_schema() -> None:
    fields = records.checks(Extended)
    assert [f.name for f in fields][-3:] == ["grad_norm", "steps", "notes"]
    valid = schema._compile_valid(schema.EventType("epoch_end", (schema.MAIN,), fields))
    event = {**extended().as_event(), "seq": 1, "t": 1.0, "type": "epoch_end", "prev": "0" * 64}
    assert valid(event)
    assert not valid({k: v for k, v in event.items() if k != "grad_norm"})  # required now
    assert not valid({**event, "steps": -1})
    assert valid({**event, "notes": {}}) and not valid({**event, "notes": 3})


def test_an_added_field_reaches_plain_columns_and_row_dicts() -> None:
    plain = epochscan.plain_struct(Extended)
    assert set(plain.__struct_fields__) == set(RESERVED) | set(REQUIRED) | {"grad_norm", "steps"}
    decode = msgspec.json.Decoder(plain).decode
    body = line(extended().as_event())
    assert decode(body).grad_norm == 1.5
    with pytest.raises(msgspec.ValidationError):
        decode(line(record().as_event()))  # the field is required on the fast path too
    with pytest.raises(msgspec.ValidationError):
        decode(line(extended(notes={"a": 1}).as_event()))  # an optional field: the ordinary path
    ints, floats = epochscan.column_fields(Extended)
    assert ints[-1] == "steps" and floats[-1] == "grad_norm"
    names = epochscan.column_names(Extended)
    row = json.loads(body)
    columns = [np.array([0]), np.array([0]), *(np.array([row[n]]) for n in names[2:])]
    rebuilt = epochscan.row_dicts_function(Extended)(columns, 7, [row["trial"]], lambda off: "0" * 64)
    assert rebuilt == [row] and list(rebuilt[0]) == sorted(row)


def test_a_field_without_a_column_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Named(EpochEnd):
        host: str = dataclasses.field(metadata=meta(string("host"), records.TRIAL))

    with pytest.raises(TypeError, match="no column"):
        epochscan.column_fields(Named)


def test_a_field_whose_check_disagrees_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Optional(EpochEnd):
        extra: int | None = dataclasses.field(default=None, metadata=meta(nonneg("extra"), COUNT))

    with pytest.raises(TypeError, match="disagree"):
        records.specs(Optional)


# ---- the writers' lines -----------------------------------------------------------------------------
def test_as_event() -> None:
    e = record(accelerators={"cpu": 2})
    assert list(e.as_event()) == [*REQUIRED, "accelerators"]
    assert EpochEnd(**e.as_event()) == e  # a checkpoint's record, logged again after a crash
    assert record(val_loss=None).as_event()["val_loss"] is None  # a required field: written as null
    assert type(record(val_accuracy=1).as_event()["val_accuracy"]) is int  # nothing converted


def scanned(log: Path) -> epochscan.Scan:
    scan = epochscan.scan_chunk(str(log), 0, log.stat().st_size)
    assert scan.clean and scan.rows is not None
    return scan


def test_writers_lines_stay_on_the_fast_path(tmp_path: Path) -> None:
    """Lines with the fields the writers emit on every epoch are plain; a line with an optional
    field (an attempt's first epoch) or a null loss (a diverged one) is left to the ordinary path."""
    log = tmp_path / "events.jsonl"
    writers = [  # train/trial.py, backends/sim.py, devdata/runfactory.py, tests/runner/fake_trial.py
        record(), record(val_loss=-math.log(0.8125), seconds=30.25),
        record(val_loss=round(2.5 * (1 - 0.8125), 6)), record(images_trained=50, val_loss=round(2.0 - 0.8125, 4))]
    with EventWriter(log, durability="none") as w:
        for e in writers:
            w.append("epoch_end", **e.as_event())
        w.append("epoch_end", **record(accelerators={"cpu": 1}, lr_scaling={"rule": "none"}).as_event())
        w.append("epoch_end", **record(val_loss=None).as_event())
    scan = scanned(log)
    assert scan.rows.offset.tolist() == [0, 1, 2, 3]
    assert [off for off, _ in epochscan.decode_records(scan.records)] == [4, 5]


def test_a_factory_run_is_all_plain(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", slots=2, trials=4, epochs=3, retry_trials={1}).path
    log = run / "events.jsonl"
    epochs = sum(b'"type":"epoch_end"' in x for x in log.read_bytes().splitlines())
    assert len(scanned(log).rows.offset) == epochs > 0
    trial_log = run / "trials" / "t0000" / "events.jsonl"
    assert len(scanned(trial_log).rows.offset) == 3
