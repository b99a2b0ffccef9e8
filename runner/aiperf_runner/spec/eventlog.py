"""The append-only, hash-chained JSON-lines event log (docs/design.md section 3).

Each line is `json.dumps(obj, sort_keys=True, separators=(",", ":"))` with `seq`, `t` (UTC float
seconds), `type` and `prev` (SHA-256 hex of the previous line's bytes without its newline).
Every line is flushed to the operating system as it is written, so a killed process loses at most
the line being written. `durability` says when lines reach the disk: "line" (the default) fsyncs
each line before the next is written; "batch" (the controller's, which writes hundreds of lines a
second at thousands of slots) leaves that to `sync()` and `close()`, called by its owner at a
bounded interval (group commit): a crash of the machine itself may then lose the lines since the
last `sync()`, and a resume continues from what is on disk; "none" never fsyncs (the sim backend's
simulated trial logs: a real trial syncs on its own node, not on the controller's).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

import msgspec

from aiperf_runner.spec.errors import AiperfError

GENESIS = "0" * 64
RESERVED = ("seq", "t", "type", "prev")
DURABILITY = ("line", "batch", "none")  # when an EventWriter fsyncs (see the module docstring)


class LogError(AiperfError, ValueError):
    """A broken log: `line` is the 1-based number of the first bad line."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def digest(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


class Event(NamedTuple):
    """One verified line: its parsed object and its raw bytes (without the newline)."""

    line: int
    data: dict[str, Any]
    raw: bytes

    @property
    def type(self) -> str:
        return self.data["type"]


BLOCK = 1 << 22
"""Bytes read at a time: lines are split out of 4 MiB blocks, not read one by one."""

_decode = msgspec.json.Decoder().decode


def parse(body: bytes) -> Any:
    """One line's JSON, exactly as `json.loads` reads it.

    msgspec parses first (several times faster); what it refuses (NaN, a lone surrogate, a byte
    order mark, a number out of a double's range) goes to `json.loads`, which decides: it accepts
    some of these, and its error message is the one reported. msgspec accepts nothing `json.loads`
    refuses, and whatever both accept they read alike (integers of any size included, unlike orjson).
    """
    try:
        return _decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return json.loads(body)


def _lines(fh: IO[bytes], tail: list[bytes]) -> Iterator[list[bytes]]:
    """The file's complete lines, a block at a time, without their newlines; what follows the last
    newline (a write cut short) is left in `tail`."""
    pending: list[bytes] = []
    while block := fh.read(BLOCK):
        if b"\n" not in block:  # a line longer than a block: gather it
            pending.append(block)
            continue
        lines = (b"".join(pending) + block if pending else block).split(b"\n")
        pending = [lines.pop()]
        yield lines
    tail.append(b"".join(pending))


def line_error(number: int, data: Any, prev: str) -> LogError:
    """Why a parsed line breaks the log (the checks in order; the first failing one is reported)."""
    if not isinstance(data, dict):
        return LogError(number, "not a JSON object")
    for key in RESERVED:
        if key not in data:
            return LogError(number, f"missing field {key!r}")
    if data["seq"] != number - 1:
        return LogError(number, f"sequence number {data['seq']!r}, expected {number - 1} "
                                "(a line was removed, added or moved)")
    if data["prev"] != prev:
        return LogError(number, "hash chain broken: 'prev' does not match the previous line "
                                "(a line was changed, removed or reordered)")
    return LogError(number, "field 't' is not a number")


def _checked(number: int, body: bytes, prev: str) -> dict[str, Any]:
    """The slow path of `iter_events` for one line: parse it and check it, or raise its LogError."""
    try:
        data = parse(body)
    except json.JSONDecodeError as exc:
        raise LogError(number, f"not valid JSON ({exc.msg})") from None
    except ValueError as exc:  # not UTF-8
        raise LogError(number, f"not valid JSON ({exc})") from None
    if (isinstance(data, dict) and all(k in data for k in RESERVED) and data["seq"] == number - 1
            and data["prev"] == prev and isinstance(data["t"], (int, float))):
        return data
    raise line_error(number, data, prev)


def check_lines(lines: list[bytes], number: int, prev: str) -> Generator[Event, None, tuple[int, str]]:
    """Check and yield lines (without newlines) following line `number` whose digest is `prev`;
    return the last line's (number, digest). LogError at the first bad line."""
    decode, sha256, dict_ = _decode, hashlib.sha256, dict
    for body in lines:
        number += 1
        # The hot path: a well-formed line as the writer writes it; anything else is parsed and
        # checked again on the slow path, which raises the exact error.
        try:
            data = decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            data = _checked(number, body, prev)
        if (type(data) is not dict_ or data.get("seq") != number - 1 or data.get("prev") != prev
                or "type" not in data or type(data.get("t")) is not float):
            data = _checked(number, body, prev)
        prev = sha256(body).hexdigest()
        yield Event(number, data, body)
    return number, prev


def iter_events(path: str | Path, *, allow_partial_tail: bool = False) -> Iterator[Event]:
    """Yield events while checking the chain; raise LogError at the first bad line.

    A last line without a newline is a write cut short by a crash: an error unless
    `allow_partial_tail`, in which case it is silently dropped (the writer does the same).
    The file is read in blocks of `BLOCK` bytes; memory stays bounded by a block.
    (spec/logchunks.py reads a large log the same way in parallel processes.)
    """
    number, prev = 0, GENESIS
    tail: list[bytes] = []
    with open(path, "rb") as fh:
        for lines in _lines(fh, tail):
            number, prev = yield from check_lines(lines, number, prev)
    if tail[0] and not allow_partial_tail:
        raise truncated(number + 1)


def truncated(number: int) -> LogError:
    return LogError(number, "truncated line (no newline): the write was cut short")


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """All events of a log as dicts (checked); LogError on the first bad line."""
    return [e.data for e in iter_events(path)]


class EventWriter:
    """Appends chained events to a log, continuing an existing one (e.g. after a crash)."""

    def __init__(self, path: str | Path, clock: Any = time.time, *, durability: str = "line") -> None:
        if durability not in DURABILITY:
            raise ValueError(f"durability must be one of {', '.join(DURABILITY)}, not {durability!r}")
        self.path = Path(path)
        self._clock = clock
        self.durability = durability
        self._unsynced = False
        self._seq = 0
        self._prev = GENESIS
        self._last_t = 0.0
        self._repair_and_load()
        self._fh: IO[bytes] = open(self.path, "ab")

    def _repair_and_load(self) -> None:
        if not self.path.exists():
            return
        good_end = 0
        for event in iter_events(self.path, allow_partial_tail=True):
            self._seq = event.data["seq"] + 1
            self._prev = digest(event.raw)
            self._last_t = float(event.data["t"])
            good_end += len(event.raw) + 1
        if good_end != self.path.stat().st_size:
            # A crash cut the last line short: drop it so the chain stays intact.
            with open(self.path, "r+b") as fh:
                fh.truncate(good_end)

    @property
    def next_seq(self) -> int:
        return self._seq

    @property
    def head(self) -> str:
        """SHA-256 of the last line written (what the next line's `prev` will be)."""
        return self._prev

    def append(self, type: str, **fields: Any) -> dict[str, Any]:
        clash = [k for k in RESERVED if k in fields]
        if clash:
            raise ValueError(f"reserved field(s) {clash} in event payload")
        # Wall clocks can step backwards; the log's timestamps must not.
        t = max(float(self._clock()), self._last_t)
        obj = {**fields, "seq": self._seq, "t": t, "type": type, "prev": self._prev}
        body = encode(obj)
        self._fh.write(body + b"\n")
        self._fh.flush()
        if self.durability == "line":
            os.fsync(self._fh.fileno())
        elif self.durability == "batch":
            self._unsynced = True
        self._seq += 1
        self._prev = digest(body)
        self._last_t = t
        return obj

    def sync(self) -> None:
        """fsync what was written since the last sync (nothing to do when every line is)."""
        if self._unsynced and not self._fh.closed:
            os.fsync(self._fh.fileno())
            self._unsynced = False

    def close(self) -> None:
        if not self._fh.closed:
            self.sync()
            self._fh.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
