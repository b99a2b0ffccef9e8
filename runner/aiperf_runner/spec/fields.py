"""The kinds of field an event's schema is written in (spec/schema.py, spec/records.py).

A `Field` is a check, as a Python expression over `v` (the value), with a phrase for error messages
and one for the documentation; the helpers below make the common kinds. `NAMESPACE` holds the
names those expressions may use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

TRIAL_ID = re.compile(r"^t\d{4,}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
RUN_ID = re.compile(r"^[0-9a-f]{32}$")
HEX = re.compile(r"^[0-9a-f]+$")

ENUMS: dict[str, frozenset[str]] = {
    "morphism": frozenset({"deeper", "wider", "skip"}),
    "hparam_source": frozenset({"seed", "inherited", "tpe"}),
    "trial_finished.reason": frozenset({"budget", "early_stop"}),
    "trial_cancelled.reason": frozenset({"duration", "stop"}),
    "run_finished.reason": frozenset({"duration", "stopped", "exhausted"}),
    "weights_kept.reason": frozenset({"beacon", "best", "unwitnessed"}),
    "weights_dropped.reason": frozenset({"beacon", "superseded", "unwitnessed"}),
}

known_trials: set[str] = set()


def is_trial(v: Any) -> bool:
    """A trial id t0000, t0001, ... (valid ids are remembered: a log repeats them millions of times)."""
    if type(v) is not str:
        return False
    if v in known_trials:
        return True
    if TRIAL_ID.fullmatch(v) is not None:
        if len(known_trials) < 1_000_000:
            known_trials.add(v)
        return True
    return False


NAMESPACE: dict[str, Any] = {
    "is_trial": is_trial, "HEX64": HEX64, "RUN_ID": RUN_ID, "HEX": HEX,
    **{"ENUM_" + k.replace(".", "_"): v for k, v in ENUMS.items()},
}
"""Names the field expressions may use."""


@dataclass(frozen=True)
class Field:
    name: str
    expr: str  # a boolean Python expression over `v`
    expects: str  # "an integer >= 1": for error messages
    doc: str = ""  # for the documentation, after the name: "(trial id or null)"
    required: bool = True  # an optional field is checked only when present


# ---- the kinds ---------------------------------------------------------------------------------------
NUMBER = "(type(v) is float or type(v) is int) and -1e308 <= v <= 1e308"  # finite: NaN fails the comparison


def enum(key: str) -> str:
    return f"type(v) is str and v in ENUM_{key.replace('.', '_')}"


def trial_field(doc: str = "") -> Field:
    return Field("trial", "is_trial(v)", "a trial id (t0000, t0001, ...)", doc)


def attempt_field() -> Field:
    return Field("attempt", "type(v) is int and v >= 1", "an integer >= 1", "(from 1)")


def pos(name: str, doc: str = "") -> Field:
    return Field(name, "type(v) is int and v >= 1", "an integer >= 1", doc)


def nonneg(name: str, doc: str = "") -> Field:
    return Field(name, "type(v) is int and v >= 0", "an integer >= 0", doc)


def string(name: str, doc: str = "") -> Field:
    return Field(name, "type(v) is str", "a string", doc)


def number(name: str, doc: str = "") -> Field:
    return Field(name, NUMBER, "a finite number", doc)


def number_or_null(name: str, doc: str = "") -> Field:
    return Field(name, f"v is None or ({NUMBER})", "a number or null", doc)


def accuracy(name: str, doc: str = "") -> Field:
    return Field(name, "(type(v) is float or type(v) is int) and 0.0 <= v <= 1.0", "a number in [0, 1]", doc)


def weights_field() -> Field:
    return Field("weights_sha256", "type(v) is str and len(v) == 64 and HEX.fullmatch(v) is not None",
                 "64 lowercase hex chars", "(SHA-256 of the final weights; optional)", required=False)


def ran_on_field() -> Field:
    """An ending attempt's nodes, written only when they differ from those its trial_started named
    (a job launched without waiting for it to start, placed by the scheduler elsewhere)."""
    return Field("nodes", "isinstance(v, list) and all(type(n) is str for n in v)", "a list of strings",
                 "(the nodes the attempt ran on, where trial_started named others; optional)", required=False)


def accelerators_field() -> Field:
    return Field("accelerators", "type(v) is dict and 0 < len(v) <= 64 and all(type(k) is str and 0 < len(k) <= 200 "
                                 "and type(n) is int and n > 0 for k, n in v.items())",
                 "an object of model name -> ranks",
                 "(the device model of every rank, `cpu` for a CPU process -> how many ranks; in the first epoch "
                 "an attempt logs; optional)", required=False)


def lr_scaling_field() -> Field:
    return Field("lr_scaling", "type(v) is dict and type(v.get('rule')) is str and type(v.get('global_batch')) is int "
                               "and v['global_batch'] >= 1 and type(v.get('reference_batch')) is int "
                               "and v['reference_batch'] >= 1 and all(type(v.get(k)) in (int, float) and "
                               "0 <= v[k] <= 1e308 for k in ('base_lr', 'peak_lr', 'warmup_epochs'))",
                 "an object: rule, base_lr, reference_batch, global_batch, peak_lr, warmup_epochs",
                 "(the learning rate the attempt trained at: rule `linear`/`none`, base_lr (the hyper-parameter), "
                 "reference_batch, global_batch, peak_lr = base_lr x global_batch / reference_batch, warmup_epochs; "
                 "in the first epoch an attempt logs; optional)", required=False)


def run_id_field() -> Field:
    return Field("run_id", "type(v) is str and RUN_ID.fullmatch(v) is not None", "32 hex chars")


def obj(name: str, doc: str = "", required: bool = True) -> Field:
    return Field(name, "isinstance(v, dict)", "an object", doc, required)


def hex_field(name: str, chars: int, doc: str = "") -> Field:
    return Field(name, f"type(v) is str and len(v) == {chars} and HEX.fullmatch(v) is not None",
                 f"{chars} lowercase hex chars", doc)
