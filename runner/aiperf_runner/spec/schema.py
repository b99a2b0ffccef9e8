"""The schema of every event type and of run.json, written once, as data.

Each field is a Python expression over `v` (the value), a phrase for error messages and a phrase
for the documentation (spec/fields.py); `epoch_end`'s fields are those of spec/records.py's
`EpochEnd`. From that one table come the validators (`valid(d)` compiled into one
function per event type, the hot path of verification; `problem(d)` naming the first bad field)
and the event tables of docs/internals.md (`markdown_table`, checked by a test).
Extra fields are allowed everywhere; unknown event types are not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from . import SPEC_VERSION, records
from .fields import (
    NAMESPACE,
    Field,
    accuracy,
    attempt_field,
    enum,
    hex_field,
    nonneg,
    number,
    obj,
    pos,
    ran_on_field,
    run_id_field,
    string,
    trial_field,
    weights_field,
)

MAIN, TRIAL = "main", "trial"
"""The two kinds of log: the controller's `events.jsonl` and each trial's `trials/<id>/events.jsonl`."""


@dataclass(frozen=True)
class EventType:
    name: str
    logs: tuple[str, ...]
    fields: tuple[Field, ...]
    doc: str = ""


# ---- the event types ----------------------------------------------------------------------------------
EVENTS: dict[str, EventType] = {e.name: e for e in (
    EventType("run_started", (MAIN,), (
        run_id_field(), string("preset"), string("rules"), pos("slots"), string("runner_version"),
        string("spec_version"), string("rules_version", "(the rules version the run was made for; spec 2)"),
        string("precision"), pos("devices_per_slot"),
        obj("dataset", "(train_images, val_images, classes, image_size: as run.json)"),
        obj("token", "(the service's run token: statement and signature; absent when unwitnessed)", required=False)),
        "the first line of the log"),
    EventType("run_resumed", (MAIN,), (string("run_id"),), "a controller continued the run after a crash or kill"),
    EventType("trial_proposed", (MAIN,), (
        trial_field(), Field("arch_hash", "type(v) is str and HEX64.fullmatch(v) is not None",
                             "64 lowercase hex chars", "(SHA-256 of the canonical graph)"),
        Field("parent", "v is None or is_trial(v)", "a trial id or null", "(trial id or null)"),
        Field("morphisms", "isinstance(v, list) and all(type(m) is str and m in ENUM_morphism for m in v)",
              "a list of deeper/wider/skip", "(list of `deeper`/`wider`/`skip`)"),
        obj("hparams"), Field("hparam_source", enum("hparam_source"), "seed, inherited or tpe",
                              "(`seed`/`inherited`/`tpe`)"),
        nonneg("round"), pos("epoch_budget")), "the search proposed a trial"),
    EventType("trial_started", (MAIN,), (
        trial_field(), attempt_field(), nonneg("slot"),
        Field("nodes", "isinstance(v, list) and all(type(n) is str for n in v)", "a list of strings",
              "(list of names)"),
        nonneg("devices")), "an attempt of a trial started on a slot"),
    EventType("epoch_end", (MAIN, TRIAL), records.checks(records.EpochEnd), "one epoch trained and evaluated"),
    EventType("epoch_states", (MAIN, TRIAL), (
        trial_field(), attempt_field(), pos("epoch", "(from 1)"), pos("steps", "(the epoch's optimizer steps)"),
        nonneg("images_trained", "(as the epoch's epoch_end)"),
        hex_field("start", 64, "(SHA-256 of the training state the epoch started from)"),
        Field("commits", "isinstance(v, list) and len(v) > 0 and all(isinstance(c, list) and len(c) == 2 and "
                         "type(c[0]) is int and c[0] > 0 and type(c[1]) is str and len(c[1]) == 64 and "
                         "HEX.fullmatch(c[1]) is not None for c in v)",
              "a non-empty list of [step, 64 hex chars]",
              "(list of `[step, sha256]`: the state after that step, the last at `steps`)"),
        Field("threads", "type(v) is int and v >= 1", "an integer >= 1",
              "(rank 0's intra-op threads: a replay with as many is exact on the same CPU; optional)", required=False)),
        "an epoch's training-state commitments, logged just before its epoch_end (spec/proof.py)"),
    EventType("trial_finished", (MAIN,), (
        trial_field(), attempt_field(), nonneg("epochs"), accuracy("best_accuracy"),
        Field("reason", enum("trial_finished.reason"), "budget or early_stop", "(`budget`/`early_stop`)"),
        weights_field(), ran_on_field()), "an attempt ended with the trial complete"),
    EventType("trial_failed", (MAIN,), (
        trial_field(), attempt_field(), string("error"), Field("retry", "type(v) is bool", "true or false",
                                                               "(bool)"), ran_on_field()),
        "an attempt failed; `retry` says whether the trial runs again"),
    EventType("trial_cancelled", (MAIN,), (
        trial_field(), attempt_field(),
        Field("reason", enum("trial_cancelled.reason"), "duration or stop", "(`duration`/`stop`)")),
        "an attempt stopped by the end of the run"),
    EventType("slot_lost", (MAIN,), (
        nonneg("slot"), string("reason"),
        Field("node", "type(v) is str", "a string", "(the node the run stopped using, as trial_started names it; "
                                                    "optional)", required=False)),
        "a slot went away"),
    EventType("heartbeat", (MAIN,), (
        number("work", "(FLOPs so far, the controller's count)"), nonneg("epochs"),
        Field("best_accuracy", "v is None or ((type(v) is float or type(v) is int) and 0.0 <= v <= 1.0)",
              "a number in [0, 1] or null")),
        "the controller sends this line's sequence number and hash to the service"),
    EventType("witness", (MAIN,), (
        run_id_field(), nonneg("heartbeat_seq", "(of the heartbeat line witnessed)"),
        hex_field("head", 64, "(SHA-256 of that line)"), number("received_at", "(the service's clock)"),
        hex_field("beacon", 64, "(32 random bytes of the service)"), string("key", "(witness key fingerprint)"),
        string("signature", "(base64 Ed25519, by the witness key)"),
        Field("previous_receipt", "v is None or (type(v) is str and len(v) == 64 and HEX.fullmatch(v) is not None)",
              "null or 64 lowercase hex chars",
              "(SHA-256 of the receipt the service issued before for this token, null for the first; absent "
              "from receipts issued before receipts were chained)", required=False)),
        "the service's receipt of a heartbeat"),
    EventType("weights_kept", (MAIN,), (
        trial_field(), hex_field("sha256", 64, "(of weights.safetensors)"),
        Field("reason", enum("weights_kept.reason"), "beacon, best or unwitnessed", "(`beacon`/`best`/`unwitnessed`)")),
        "the trial's final weights stay in its directory for the service's audit"),
    EventType("weights_dropped", (MAIN,), (
        trial_field(), Field("reason", enum("weights_dropped.reason"), "beacon, superseded or unwitnessed",
                             "(`beacon`/`superseded`/`unwitnessed`)")),
        "the trial's weights were deleted: not selected"),
    EventType("run_finished", (MAIN,), (
        Field("reason", enum("run_finished.reason"), "duration, stopped or exhausted",
              "(`duration`/`stopped`/`exhausted`)"),), "the last line of a complete run"),
    EventType("trial_result", (TRIAL,), (
        trial_field(), attempt_field(), nonneg("epochs"), accuracy("best_accuracy"),
        Field("reason", enum("trial_finished.reason"), "budget or early_stop", "(`budget`/`early_stop`)"),
        weights_field()), "the trial program finished the trial"),
    EventType("trial_error", (TRIAL,), (trial_field(), attempt_field(), string("error")),
              "the trial program failed with an exception"),
)}

RUN_JSON = EventType("run.json", (), (
    run_id_field(), string("runner_version"), string("spec_version"), string("rules_version"), string("rules"),
    string("preset"), string("precision"), obj("config"), obj("system"), obj("declared_peak_flops"), obj("dataset")))


# ---- the released versions ----------------------------------------------------------------------------
def _widened(et: EventType, dropped: frozenset[str], optional: frozenset[str]) -> EventType:
    """`et` without the fields `dropped` and with the fields `optional` no longer required."""
    fields = tuple(replace(f, required=False) if f.name in optional else f for f in et.fields if f.name not in dropped)
    return replace(et, fields=fields)


_SINCE_2 = frozenset({"rules_version"})
# Spec 1 as the verifier reads it: the union of what its runners wrote. The first runners (to 1 December,
# rules 1.0) wrote run_started without precision, devices_per_slot and dataset; the runners of rules 2.0 to 3.1
# added them (and new event types and optional fields) while still writing "1".
SPEC_1_EVENTS = {**EVENTS, "run_started": _widened(
    EVENTS["run_started"], _SINCE_2, frozenset({"precision", "devices_per_slot", "dataset"}))}
SPEC_1_RUN_JSON = _widened(RUN_JSON, _SINCE_2, frozenset())


def _compile_valid(et: EventType) -> Callable[[Mapping[str, Any]], bool]:
    lines = ["def valid(d):", "    try:"]
    for f in et.fields:
        if f.required:
            lines += [f"        v = d[{f.name!r}]", f"        if not ({f.expr}): return False"]
        else:
            lines += [f"        if {f.name!r} in d:", f"            v = d[{f.name!r}]",
                      f"            if not ({f.expr}): return False"]
    lines += ["    except KeyError:", "        return False", "    return True"]
    namespace = dict(NAMESPACE)
    exec("\n".join(lines), namespace)  # noqa: S102 - code built from the constant table above
    check: Callable[[Mapping[str, Any]], bool] = namespace["valid"]
    return check


def _compile_field(f: Field) -> Callable[[Any], bool]:
    check: Callable[[Any], bool] = eval(f"lambda v: {f.expr}", dict(NAMESPACE))  # noqa: S307
    return check


class Schema:
    """One spec version's schema: the event types and run.json, compiled into validators."""

    def __init__(self, version: str, events: Mapping[str, EventType], run_json: EventType) -> None:
        self.version, self.events, self.run_json = version, dict(events), run_json
        self._valid = {name: _compile_valid(et) for name, et in self.events.items()}
        self._field_checks = {name: [(f.name, _compile_field(f), f.expects, f.required) for f in et.fields]
                              for name, et in self.events.items()}
        self._run_json_checks = [(f.name, _compile_field(f), f.expects, f.required) for f in run_json.fields]
        self.valid_epoch_end = self._valid["epoch_end"]

    def types(self, log: str = MAIN) -> frozenset[str]:
        """The event types a log of this kind may hold."""
        return frozenset(name for name, e in self.events.items() if log in e.logs)

    def valid(self, d: Mapping[str, Any]) -> bool:
        """True if the event has a known type and every field of its type is present and well-formed."""
        check = self._valid.get(d.get("type"))  # type: ignore[arg-type]
        return check is not None and check(d)

    def problem(self, d: Mapping[str, Any], log: str = MAIN) -> str | None:
        """Why an event does not match its type's schema (the first bad field), or None."""
        kind = d.get("type")
        et = self.events.get(kind) if isinstance(kind, str) else None
        if et is None or log not in et.logs:
            return f"unknown event type {kind!r}"
        for key, ok, expects, required in self._field_checks[et.name]:
            if key not in d:
                if not required:
                    continue
                return f"{kind}: missing field {key!r}"
            if not ok(d[key]):
                return f"{kind}: field {key!r} is {d[key]!r}, expected {expects}"
        return None

    def run_json_problems(self, run: Mapping[str, Any]) -> list[str]:
        """What is missing or mistyped in run.json (the fields verification needs)."""
        problems = []
        for key, ok, expects, required in self._run_json_checks:
            if key not in run:
                if required:
                    problems.append(f"run.json: missing field {key!r}")
            elif not ok(run[key]):
                problems.append(f"run.json: field {key!r} is {run[key]!r}, expected {expects}")
        cfg = run.get("config")
        if isinstance(cfg, dict) and not (type(cfg.get("slots")) is int and cfg["slots"] >= 1):
            problems.append(f"run.json: config.slots is {cfg.get('slots')!r}, expected an integer >= 1")
        ds = run.get("dataset")
        if isinstance(ds, dict):
            for key in ("train_images", "val_images"):
                if not (type(ds.get(key)) is int and ds[key] >= 0):
                    problems.append(f"run.json: dataset.{key} is {ds.get(key)!r}, expected an integer >= 0")
        return problems

    def fingerprint(self) -> str:
        """SHA-256 of what the schema accepts: every event type's logs and fields (name, check, required),
        run.json's, and the enumerations and patterns the checks use. Documentation phrases do not count. A
        released spec version's fingerprints are recorded (tests/golden/log_schema_versions.json): a change to
        what the schema accepts is either compatible (recorded under the same version, with its reason) or a
        new SPEC_VERSION."""

        def fields(et: EventType) -> list[list[Any]]:
            return [[f.name, f.expr, f.required] for f in et.fields]

        names = {k: (sorted(v) if isinstance(v, set | frozenset | list | tuple) else
                     getattr(v, "pattern", None) or getattr(v, "__name__", repr(v)))
                 for k, v in NAMESPACE.items()}
        accepted = {"events": {name: {"logs": list(et.logs), "fields": fields(et)}
                               for name, et in sorted(self.events.items())},
                    "run.json": fields(self.run_json), "names": names}
        return hashlib.sha256(json.dumps(accepted, sort_keys=True, default=str).encode()).hexdigest()


SCHEMAS: dict[str, Schema] = {"1": Schema("1", SPEC_1_EVENTS, SPEC_1_RUN_JSON), "2": Schema("2", EVENTS, RUN_JSON)}
"""Every released spec version's schema (spec.SPEC_VERSIONS); the last is the one runners write."""

CURRENT = SCHEMAS[SPEC_VERSION]


def for_version(spec_version: Any) -> Schema:
    """The schema of a log that declares `spec_version`; the current one for a version never released (the
    `integrity.versions` check fails such a log)."""
    return SCHEMAS.get(spec_version, CURRENT) if isinstance(spec_version, str) else CURRENT


# The current version's, for writers and the hot paths (epoch_end is the same in every version).
types = CURRENT.types
valid = CURRENT.valid
valid_epoch_end = CURRENT.valid_epoch_end
problem = CURRENT.problem
run_json_problems = CURRENT.run_json_problems


# ---- documentation -----------------------------------------------------------------------------------
def markdown_table(log: str = MAIN) -> str:
    """The event table of docs/internals.md for one kind of log (tests check the docs against it)."""
    rows = ["| type | fields |", "| --- | --- |"]
    for et in EVENTS.values():
        if log in et.logs:
            fields = ", ".join(f"{f.name} {f.doc}".strip() for f in et.fields)
            rows.append(f"| `{et.name}` | {fields} |")
    return "\n".join(rows)


def fingerprint(spec_version: str = SPEC_VERSION) -> str:
    """`Schema.fingerprint` of a released spec version (the current one by default)."""
    return SCHEMAS[spec_version].fingerprint()


if __name__ == "__main__":
    import sys

    print(markdown_table(sys.argv[1] if len(sys.argv) > 1 else MAIN))

