"""The `epoch_end` record, defined once: its fields, their types and checks, required or optional.

Every writer of an epoch line (train/trial.py, backends/sim.py, the factories of devdata/ and the
tests) builds it as `EpochEnd(...).as_event()`. What else knows the record's fields is made from
`EpochEnd`'s (`specs`): the schema's check of an `epoch_end` line (spec/schema.py) and the fast
path's typed decoder and columns (spec/epochscan.py `Plain`, `Columns`, `Chunk.row_dicts`). A field
is added here and nowhere else; tests/verify/test_epoch_record.py checks that it reaches them all.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, NamedTuple

import msgspec

from .fields import (
    Field,
    accelerators_field,
    accuracy,
    attempt_field,
    lr_scaling_field,
    nonneg,
    number,
    number_or_null,
    pos,
    trial_field,
)


class Kind(NamedTuple):
    """How the fast path reads a required field: its msgspec type (checked in C) and its column."""

    plain: Any
    column: str  # "int" (int64), "float" (float64) or "trial" (an index into the chunk's trial ids)


COUNT = Kind(Annotated[int, msgspec.Meta(ge=0)], "int")
POSITIVE = Kind(Annotated[int, msgspec.Meta(ge=1)], "int")
# A float where the schema asks for a finite number; an int is let through to be told apart in
# Python (the writer writes floats, and an int would print and hash differently downstream).
NUMBER = Kind(int | Annotated[float, msgspec.Meta(ge=-1e308, le=1e308)], "float")
NUMBER_OR_NULL = Kind(None | NUMBER.plain, "float")
ACCURACY = Kind(int | Annotated[float, msgspec.Meta(ge=0.0, le=1.0)], "float")
TRIAL = Kind(str, "trial")


def meta(check: Field, kind: Kind | None = None) -> dict[str, Any]:
    """A record field's metadata: its schema check and, for a required field, its `Kind`."""
    return {"check": check, "kind": kind}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EpochEnd:
    """One epoch trained and evaluated (the writer adds `seq`, `t`, `type` and `prev`).

    A field with a default is optional: written only when set (not None), checked only when
    present, and a line that has it takes the ordinary path of verification, not the fast one.
    """

    trial: str = dataclasses.field(metadata=meta(trial_field(), TRIAL))
    attempt: int = dataclasses.field(metadata=meta(attempt_field(), POSITIVE))
    epoch: int = dataclasses.field(metadata=meta(pos("epoch", "(from 1)"), POSITIVE))
    images_trained: int = dataclasses.field(metadata=meta(nonneg("images_trained"), COUNT))
    images_evaluated: int = dataclasses.field(metadata=meta(nonneg("images_evaluated"), COUNT))
    val_accuracy: float = dataclasses.field(metadata=meta(accuracy("val_accuracy"), ACCURACY))
    val_loss: float | None = dataclasses.field(metadata=meta(number_or_null("val_loss"), NUMBER_OR_NULL))
    started_at: float = dataclasses.field(metadata=meta(number("started_at"), NUMBER))
    ended_at: float = dataclasses.field(
        metadata=meta(number("ended_at", "(float UTC seconds, from the trial process)"), NUMBER))
    seconds: float = dataclasses.field(metadata=meta(number("seconds"), NUMBER))
    accelerators: dict[str, int] | None = dataclasses.field(default=None, metadata=meta(accelerators_field()))
    lr_scaling: dict[str, Any] | None = dataclasses.field(default=None, metadata=meta(lr_scaling_field()))

    def as_event(self) -> dict[str, Any]:
        """The line's fields as given (nothing converted: the bytes written are the caller's
        values), the optional ones only when set."""
        required, optional = names(type(self))
        event = {name: getattr(self, name) for name in required}
        for name in optional:
            value = getattr(self, name)
            if value is not None:
                event[name] = value
        return event


class Spec(NamedTuple):
    """One field of a record, as the schema and the fast path see it."""

    name: str
    check: Field
    kind: Kind | None  # None: optional


def specs(record: type = EpochEnd) -> tuple[Spec, ...]:
    """The record's fields in order. TypeError where a field's check, kind and default disagree."""
    out = []
    for f in dataclasses.fields(record):
        check, kind = f.metadata["check"], f.metadata["kind"]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if check.name != f.name or check.required != required or (kind is not None) != required:
            raise TypeError(f"{record.__name__}.{f.name}: its check ({check.name}, required={check.required}), "
                            f"kind ({kind}) and default disagree")
        out.append(Spec(f.name, check, kind))
    return tuple(out)


def names(record: type = EpochEnd) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(required, optional) field names of the record, in order (asked for every line written: kept)."""
    known = _NAMES.get(record)
    if known is None:
        fields = specs(record)
        known = _NAMES[record] = (tuple(s.name for s in fields if s.kind is not None),
                                  tuple(s.name for s in fields if s.kind is None))
    return known


_NAMES: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def checks(record: type = EpochEnd) -> tuple[Field, ...]:
    """The schema's fields of the record's event type (spec/schema.py)."""
    return tuple(s.check for s in specs(record))
