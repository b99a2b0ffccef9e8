"""The append-only, hash-chained JSON-lines event log (DESIGN section 3).

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

GENESIS = "0" * 64
RESERVED = ("seq", "t", "type", "prev")
DURABILITY = ("line", "batch", "none")  # when an EventWriter fsyncs (see the module docstring)


class LogError(ValueError):
    """A broken log: `line` is the 1-based number of the first bad line."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def digest(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


@dataclass(frozen=True)
class Event:
    """One verified line: its parsed object and its raw bytes (without the newline)."""

    line: int
    data: dict[str, Any]
    raw: bytes

    @property
    def type(self) -> str:
        return self.data["type"]


def iter_events(path: str | Path, *, allow_partial_tail: bool = False) -> Iterator[Event]:
    """Yield events while checking the chain; raise LogError at the first bad line.

    A last line without a newline is a write cut short by a crash: an error unless
    `allow_partial_tail`, in which case it is silently dropped (the writer does the same).
    """
    prev = GENESIS
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                if allow_partial_tail:
                    return
                raise LogError(number, "truncated line (no newline): the write was cut short")
            body = raw[:-1]
            try:
                data = json.loads(body)
            except json.JSONDecodeError as exc:
                raise LogError(number, f"not valid JSON ({exc.msg})") from None
            except ValueError as exc:  # not UTF-8
                raise LogError(number, f"not valid JSON ({exc})") from None
            if not isinstance(data, dict):
                raise LogError(number, "not a JSON object")
            for key in RESERVED:
                if key not in data:
                    raise LogError(number, f"missing field {key!r}")
            if data["seq"] != number - 1:
                raise LogError(number, f"sequence number {data['seq']!r}, expected {number - 1} "
                                       "(a line was removed, added or moved)")
            if data["prev"] != prev:
                raise LogError(number, "hash chain broken: 'prev' does not match the previous line "
                                       "(a line was changed, removed or reordered)")
            if not isinstance(data["t"], (int, float)):
                raise LogError(number, "field 't' is not a number")
            prev = digest(body)
            yield Event(number, data, body)


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
