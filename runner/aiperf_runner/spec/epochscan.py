"""One chunk of an event log parsed, hash-checked and sorted into plain epochs and other lines.

`scan_chunk(path, start, end, limits)` is what a worker of spec/logchunks.py does with the lines in
[start, end). Nine lines in ten of a large log are `epoch_end` lines as the writer writes them; such
a line is read with a typed msgspec decoder (`Plain`: the required fields of spec/records.py's
`EpochEnd`, their types and ranges checked in C, nothing else allowed) into columns (`Columns`,
numpy), which the verifying process folds a chunk at a time (spec/fastfold.py). `Plain`, `Columns`
and `Chunk.row_dicts` are made from `EpochEnd`'s fields. Any other line — another event type, an extra or
optional field, an integer where the writer writes a float, a value the schema or the audit's own
per-epoch checks (`EpochLimits`) would remark on — is sent as its dict, exactly as `json.loads`
reads it, and takes the ordinary path. The columns hold every field of a plain line, so the dict
`json.loads` would give can be rebuilt (`Chunk.row_dicts`) where the fold needs one.

The chain is checked inside the chunk (each `prev` against the previous line's digest) and so are
the sequence numbers relative to the first; the caller joins the chunk to the previous one (the
first `prev`, the first `seq`). `clean` is False at the first line that breaks anything: the caller
then reads the chunk again with `eventlog.check_lines`, which names the exact error.
"""

from __future__ import annotations

import hashlib
from collections import namedtuple
from collections.abc import Callable
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import msgspec
import numpy as np

from .eventlog import RESERVED, parse
from .fields import is_trial, known_trials
from .records import EpochEnd, specs

RESERVED_PLAIN: tuple[tuple[str, Any], ...] = (("type", Literal["epoch_end"]), ("seq", int), ("t", int | float),
                                               ("prev", str))
"""The fields every line has (spec/eventlog.py), as the fast path types them."""


def plain_struct(record: type = EpochEnd) -> type[msgspec.Struct]:
    """The fast path's typed decoder: an `epoch_end` line with exactly the reserved fields and the
    record's required ones, each of the type and range of its `Kind` (spec/records.py), nothing else."""
    fields = [*RESERVED_PLAIN, *((s.name, s.kind.plain) for s in specs(record) if s.kind is not None)]
    return msgspec.defstruct("Plain", fields, module=__name__, forbid_unknown_fields=True, gc=False)


def column_fields(record: type = EpochEnd) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(int fields, float fields) of the record's columns: its required fields by `Kind.column`,
    `t` first of the floats. TypeError for a kind that has no column."""
    columns = [(s.name, s.kind.column) for s in specs(record) if s.kind is not None]
    # The trial id is kept as an index into the chunk's ids: one field only, `trial`.
    odd = [name for name, column in columns
           if column not in ("int", "float", "trial") or (column == "trial") != (name == "trial")]
    if odd or ("trial", "trial") not in columns:
        raise TypeError(f"{record.__name__}: no column for {odd or 'trial'} (spec/epochscan.py)")
    return (tuple(name for name, column in columns if column == "int"),
            ("t", *(name for name, column in columns if column == "float")))


def column_names(record: type = EpochEnd) -> tuple[str, ...]:
    """`Columns`' names: the line's index in the chunk, its trial's index, the int and float fields."""
    ints, floats = column_fields(record)
    return ("offset", "trial", *ints, *floats)


def row_dicts_function(record: type = EpochEnd) -> Callable[[Any, int, list[str], Callable[[int], str]],
                                                             list[dict[str, Any]]]:
    """`f(columns, base, trials, prev)`: the dict `json.loads` gives for each plain line, keys in
    the writer's (sorted) order. Compiled from the record's fields: one comprehension, no Python
    code per field."""
    names = column_names(record)
    value = {"prev": "prev(offset)", "seq": "base + offset", "trial": "trials[trial]",
             "type": "'epoch_end'"}
    keys = sorted({*RESERVED, *names} - {"offset"})
    items = ", ".join(f"{k!r}: {value.get(k) or k}" for k in keys)
    source = (f"lambda columns, base, trials, prev: [{{{items}}} for {', '.join(names)} "
              f"in zip(*(c.tolist() for c in columns), strict=True)]")
    fn: Callable[[Any, int, list[str], Callable[[int], str]], list[dict[str, Any]]] = eval(source)  # noqa: S307
    return fn


Plain = plain_struct()
"""An `epoch_end` line with exactly the record's required fields, well-formed (as spec/schema.py checks)."""

INT_FIELDS, FLOAT_FIELDS = column_fields()
_namedtuple: Any = namedtuple  # called with names made at run time, which a type checker cannot follow
_ColumnsBase: Any = _namedtuple("Columns", column_names())


class Columns(_ColumnsBase):
    """A chunk's plain epochs as columns (numpy arrays, one entry per plain line, in line order):
    `offset` (int32, the line's index in the chunk), `trial` (int32, index into the chunk's
    `trials`), then `INT_FIELDS` (int64) and `FLOAT_FIELDS` (float64), named as the record's fields."""

    __slots__ = ()

    if TYPE_CHECKING:  # the columns' names are known only when the record is read
        def __getattr__(self, name: str) -> Any: ...


_row_dicts = row_dicts_function()


class EpochLimits(NamedTuple):
    """The audit's per-epoch checks that need no state (spec/logaudit.py `LogAudit.on_epoch`): a line
    that fails one is sent as a record, so that the ordinary path records the finding
    (tests/verify/test_epoch_checks.py proves the two alike)."""

    skew: float  # ended_at may be at most this after the line's t
    val_images: int | None  # images_evaluated must equal this
    images_cap: float | None  # images_trained may not exceed this


class Scan(NamedTuple):
    """What a worker sends back for a chunk."""

    first_prev: Any  # the first line's prev (the previous chunk's last digest, if intact)
    first_seq: Any  # the first line's seq
    last_digest: str | None  # the last line's SHA-256
    lines: int
    clean: bool
    records: bytes  # msgpack of [[offset, event], ...]: every line that is not a plain epoch
    rows: Columns | None
    trials: list[str]
    digests: str  # every line's SHA-256, 64 hex digits each


class Chunk(NamedTuple):
    """Lines of the log from `first_line` on (1-based), scanned and joined to the lines before
    (what spec/logchunks.py `iter_scans` yields)."""

    first_line: int
    lines: int
    first_prev: str
    digests: str
    rec_offsets: list[int]
    recs: list[dict[str, Any]]
    rows: Columns
    trials: list[str]

    def prev(self, offset: int) -> str:
        """The `prev` of the line at `offset` (the digest of the line before it)."""
        return self.first_prev if offset == 0 else self.digests[64 * offset - 64:64 * offset]

    def row_dicts(self, rows: Any = None) -> list[dict[str, Any]]:
        """The dict `json.loads` gives for each plain line (all, or those at the row indices
        `rows`), keys in the writer's order."""
        cols = self.rows if rows is None else [c[rows] for c in self.rows]
        return _row_dicts(cols, self.first_line - 1, self.trials, self.prev)

    def tail(self, k: int) -> Chunk:
        """The chunk's lines from offset `k` on, as a chunk of their own."""
        keep = self.rows.offset >= k
        rows = Columns(*(c[keep] for c in self.rows))
        rows = rows._replace(offset=rows.offset - k)
        recs = [(off - k, d) for off, d in zip(self.rec_offsets, self.recs, strict=True) if off >= k]
        return Chunk(self.first_line + k, self.lines - k, self.prev(k), self.digests[64 * k:],
                     [off for off, _ in recs], [d for _, d in recs], rows, self.trials)

    def events(self) -> list[tuple[int, dict[str, Any]]]:
        """(offset, event) of every line, in order."""
        out: list[Any] = [None] * self.lines
        for off, d in zip(self.rows.offset.tolist(), self.row_dicts(), strict=True):
            out[off] = (off, d)
        for off, d in zip(self.rec_offsets, self.recs, strict=True):
            out[off] = (off, d)
        return out


NOT_CLEAN = Scan(None, None, None, 0, False, b"", None, [], "")

_decode_plain = msgspec.json.Decoder(Plain).decode
_decode_any = msgspec.json.Decoder().decode
decode_records = msgspec.msgpack.Decoder(list[tuple[int, dict[str, Any]]]).decode


def _record(body: bytes) -> dict[str, Any] | None:
    """A line that is not a plain epoch: its dict, if it has the form every line must have, else None."""
    try:
        data = _decode_any(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        try:
            data = parse(body)
        except ValueError:
            return None
    if type(data) is dict and "seq" in data and "type" in data and "prev" in data and type(data.get("t")) is float:
        return data
    if isinstance(data, dict) and all(k in data for k in RESERVED) and isinstance(data["t"], (int, float)):
        return data
    return None


class _Rows(NamedTuple):
    first_prev: Any
    first_seq: Any
    columns: Columns
    trials: list[str]
    odd: Any  # rows that are not plain after all (see `_rows`)


def _rows(plains: list[Any], offsets: Any, records: list[tuple[int, dict[str, Any]]], digests: str,
          limits: EpochLimits | None) -> _Rows | None:
    """The plain epochs as columns, if every line's prev is the digest of the line before and every
    seq follows on from the first (else None; None too where an integer does not fit in 64 bits).

    `odd` marks the rows that are not plain after all: a float field that holds an int or null, a
    trial id the schema refuses, one of `limits`' findings. Each field is read in one pass over the
    structs (C-level `attrgetter` maps), so no Python code runs per row.
    """
    n = len(plains)
    head: Any = plains[0] if n and offsets[0] == 0 else records[0][1]
    first_prev, first_seq = (head.prev, head.seq) if n and offsets[0] == 0 else (head["prev"], head["seq"])
    try:
        for off, data in records:  # few: one by one
            if off and (data["prev"] != digests[64 * off - 64:64 * off] or data["seq"] != first_seq + off):
                return None
        if n and type(first_seq) is not int:
            return None
        ints = np.fromiter(chain.from_iterable(map(attrgetter("seq", *INT_FIELDS), plains)), np.int64,
                           n * (1 + len(INT_FIELDS))).reshape(n, 1 + len(INT_FIELDS))
    except (TypeError, OverflowError):  # a first seq that is not a number, one beyond 64 bits
        return None
    if not (ints[:, 0] == offsets + first_seq).all():
        return None
    prevs = list(map(attrgetter("prev"), plains))
    if set(map(len, prevs)) - {64}:  # a prev of another length: the chain is broken
        return None
    got = "".join(prevs).encode()
    if len(got) != 64 * n:  # not ASCII
        return None
    later = offsets > 0
    want = np.frombuffer(digests.encode(), dtype="S64")[offsets[later] - 1].tobytes()
    if np.frombuffer(got, dtype="S64")[later].tobytes() != want:
        return None
    odd = np.zeros(n, dtype=bool)
    floats = list(map(attrgetter(*FLOAT_FIELDS), plains))
    if set(map(type, chain.from_iterable(floats))) - {float}:  # an int or null: told apart (rare)
        odd |= np.fromiter((any(type(v) is not float for v in row) for row in floats), bool, n)
        floats = [(0.0,) * len(FLOAT_FIELDS) if bad else row for row, bad in zip(floats, odd.tolist(), strict=True)]
    f = np.fromiter(chain.from_iterable(floats), np.float64, n * len(FLOAT_FIELDS)).reshape(n, len(FLOAT_FIELDS))
    cols: dict[str, Any] = {name: f[:, k].copy() for k, name in enumerate(FLOAT_FIELDS)}
    cols.update({name: ints[:, k + 1].copy() for k, name in enumerate(INT_FIELDS)})
    trials = list(map(attrgetter("trial"), plains))
    names = list(dict.fromkeys(trials))  # in order of first appearance
    index = {name: k for k, name in enumerate(names)}
    trial = np.fromiter(map(index.__getitem__, trials), np.int32, n)
    bad = [index[name] for name in set(names) - known_trials if not is_trial(name)]
    if bad:
        odd |= np.isin(trial, bad)
    if limits is not None:
        skew, val_images, cap = limits
        t, started, ended = cols["t"], cols["started_at"], cols["ended_at"]
        odd |= ~((started <= ended) & (ended <= t + skew))  # what LogAudit.on_epoch would find
        trained, evaluated = cols["images_trained"], cols["images_evaluated"]
        if val_images is not None:
            odd |= evaluated != val_images if 0 <= val_images < 2 ** 63 else True
        if cap is not None:  # compared as floats below 2**53 only, where numpy and Python agree
            odd |= (trained >= 2 ** 53) | (trained > cap)
    columns = Columns(offsets.astype(np.int32), trial, *(cols[f] for f in INT_FIELDS), *(cols[f] for f in FLOAT_FIELDS))
    return _Rows(first_prev, first_seq, columns, names, odd)


def scan_chunk(path: str, start: int, end: int, limits: EpochLimits | None = None) -> Scan:
    """Worker: the lines in [start, end) (which ends with a newline), parsed and checked.

    Checks everything `eventlog.iter_events` does but what needs the chunk's place in the log: the
    first line's `prev` and `seq` (returned for the caller to join). The loop does only what each
    line needs alone (parse, form, digest); the chain and the sequence are checked after it, at once.
    """
    with open(path, "rb") as fh:
        fh.seek(start)
        lines = fh.read(end - start).split(b"\n")
    lines.pop()  # after the last newline: nothing
    decode, sha256 = _decode_plain, hashlib.sha256
    plains: list[Any] = []
    plain = plains.append
    records: list[tuple[int, dict[str, Any]]] = []
    hexes: list[str] = []
    digest = hexes.append
    for i, body in enumerate(lines):
        try:
            plain(decode(body))
        except (msgspec.DecodeError, msgspec.ValidationError):
            data = _record(body)
            if data is None:
                return NOT_CLEAN
            records.append((i, data))
        digest(sha256(body).hexdigest())
    if not lines:
        return NOT_CLEAN
    digests = "".join(hexes)
    offsets = np.delete(np.arange(len(lines), dtype=np.int64), [off for off, _ in records])
    rows = _rows(plains, offsets, records, digests, limits)
    if rows is None:
        return NOT_CLEAN
    # A plain epoch only if the ordinary path would take the line in silence: the others are sent
    # as their dicts.
    columns, odd = rows.columns, rows.odd
    if odd.any():
        for off in offsets[odd].tolist():
            data = _record(lines[off])
            assert data is not None  # it parsed as a plain epoch
            records.append((off, data))
        records.sort(key=lambda r: r[0])
        columns = Columns(*(c[~odd] for c in columns))
    try:
        payload = msgspec.msgpack.encode(records)
    except (OverflowError, TypeError, ValueError, msgspec.EncodeError):  # beyond 64 bits, a lone surrogate
        return NOT_CLEAN
    return Scan(rows.first_prev, rows.first_seq, hexes[-1], len(lines), True, payload, columns, rows.trials, digests)
