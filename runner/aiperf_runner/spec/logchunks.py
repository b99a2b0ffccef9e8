"""A large event log read in parallel: chunks parsed and hash-checked in worker processes.

`iter_records(path, workers)` yields `(line, event)` exactly as `eventlog.iter_events` would
(same events, same LogError at the same first bad line), for logs of gigabytes. The file is cut
at newlines into chunks of `CHUNK` bytes; each worker parses its chunk (msgspec), checks every
line's form and the hash chain inside the chunk, and sends back the events (msgpack, compact and
fast to read) with the chunk's first `prev` and last line's digest. This process joins the
boundary links (a chunk's first `prev` must be the digest of the previous chunk's last line) and
checks each `seq` against the line number, in order; a chunk with anything wrong in it is read
again here with `eventlog.check_lines`, which raises the exact error. At most `2 x workers`
chunks are in flight (workers: `MAX_WORKERS` at most), so memory stays bounded whatever the log's size.

Where processes cannot be started (a daemonic worker, limits) or a worker dies, the rest of the
log is read in this process; a log under `MIN_PARALLEL` bytes is read in this process anyway.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from .eventlog import GENESIS, RESERVED, check_lines, iter_events, line_error, parse, truncated

CHUNK = 8 << 20
"""Bytes per chunk (about 25,000 lines of a typical log)."""
MIN_PARALLEL = 64 << 20
"""Logs smaller than this are read in this process (starting workers costs more than it saves)."""
MAX_WORKERS = 4
"""Readers at most: the fold in this process, not the reading, bounds the speed beyond that; with
`2 x MAX_WORKERS` chunks in flight, memory stays under about 100 MB besides the fold's."""

Chunk = tuple[Any, Any, bytes, bool]
"""What a worker sends back: (first line's prev, last line's digest, events as msgpack, clean)."""


def _check_chunk(path: str, start: int, end: int) -> Chunk:
    """Worker: parse and check the lines in [start, end) (which ends with a newline).

    Checks everything `iter_events` does but the sequence numbers (which need the line numbers)
    and the first line's `prev` (the previous chunk's); `clean` is False at the first line that
    fails, and the chunk is then read again by the caller, which reports the exact error.
    """
    with open(path, "rb") as fh:
        fh.seek(start)
        lines = fh.read(end - start).split(b"\n")
    lines.pop()  # after the last newline: nothing
    decode, sha256, dict_, float_ = msgspec.json.Decoder().decode, hashlib.sha256, dict, float
    records: list[Any] = []
    first_prev: Any = None
    prev: Any = None
    for body in lines:
        try:
            data = decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            try:
                data = parse(body)
            except ValueError:
                return None, None, b"", False
        if not (type(data) is dict_ and "seq" in data and "type" in data and type(data.get("t")) is float_
                and "prev" in data):
            if not (isinstance(data, dict) and all(k in data for k in RESERVED)
                    and isinstance(data["t"], (int, float))):
                return None, None, b"", False
        if prev is None:
            first_prev = data["prev"]
        elif data["prev"] != prev:
            return None, None, b"", False
        prev = sha256(body).hexdigest()
        records.append(data)
    try:
        payload = msgspec.msgpack.encode(records)
    except (OverflowError, TypeError, ValueError, msgspec.EncodeError):  # beyond 64 bits, a lone surrogate
        return None, None, b"", False
    return first_prev, prev, payload, True


def _bounds(path: Path, size: int, chunk: int) -> tuple[list[tuple[int, int]], int]:
    """Chunks [start, end), each cut just after a newline, and where the bytes after the log's
    last newline begin (a line cut short, if any)."""
    with open(path, "rb") as fh:
        end = size
        while end > 0:
            back = min(end, 1 << 20)
            fh.seek(end - back)
            found = fh.read(back).rfind(b"\n")
            if found >= 0:
                end = end - back + found + 1
                break
            end -= back
        bounds, start = [], 0
        while start < end:
            stop = start + chunk
            if stop >= end:
                stop = end
            else:  # on to the end of the line the cut falls in
                fh.seek(stop - 1)
                stop += len(fh.readline()) - 1
            bounds.append((start, stop))
            start = stop
    return bounds, end


def _pool(workers: int) -> ProcessPoolExecutor | None:
    try:
        import multiprocessing

        ctx = multiprocessing.get_context("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                                          else "spawn")
        return ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    except Exception:  # noqa: BLE001 - no processes here: read in this process
        return None


def _sequential(path: Path, start: int, end: int, number: int,
                prev: str) -> Generator[tuple[int, dict[str, Any]], None, tuple[int, str]]:
    """The lines in [start, end) read and checked here (the exact error); returns (number, digest)
    of the last one."""
    with open(path, "rb") as fh:
        fh.seek(start)
        lines = fh.read(end - start).split(b"\n")
    lines.pop()
    events = check_lines(lines, number, prev)
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            last: tuple[int, str] = stop.value
            return last
        yield event.line, event.data


def iter_records(path: str | Path, workers: int | None = None, *, allow_partial_tail: bool = False,
                 chunk: int | None = None, min_parallel: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, event) of every line of the log, checked as `eventlog.iter_events` checks them.

    `workers`: processes reading chunks of `chunk` bytes (defaults: one per CPU but one, at most
    `MAX_WORKERS`; `CHUNK`). With fewer than 2, or a log under `min_parallel` bytes (default
    `MIN_PARALLEL`), the log is read in this process.
    """
    path = Path(path)
    size = path.stat().st_size
    # By default one CPU is left to the fold in this process: readers competing with it gain nothing.
    workers = min(workers if workers is not None else (os.cpu_count() or 1) - 1, MAX_WORKERS)
    small = size < (MIN_PARALLEL if min_parallel is None else min_parallel)
    pool = _pool(workers) if workers >= 2 and not small else None
    if pool is None:
        for event in iter_events(path, allow_partial_tail=allow_partial_tail):
            yield event.line, event.data
        return
    bounds, tail_start = _bounds(path, size, chunk or CHUNK)
    number, prev = 0, GENESIS
    pending: deque[tuple[tuple[int, int], Future[Chunk]]] = deque()
    todo = iter(bounds)

    def submit() -> None:
        nxt = next(todo, None)
        if nxt is not None:
            try:
                pending.append((nxt, pool.submit(_check_chunk, str(path), *nxt)))
            except Exception:  # noqa: BLE001 - no processes after all: this chunk and the rest are read here
                for _ in todo:
                    pass

    try:
        for _ in range(2 * workers):
            submit()
        decode = msgspec.msgpack.Decoder().decode
        for start, end in bounds:
            result: Chunk | None = None
            if pending and pending[0][0] == (start, end):
                try:
                    result = pending.popleft()[1].result()
                except Exception:  # noqa: BLE001 - a worker died: this chunk is read here
                    result = None
                submit()
            if result is not None and result[3] and result[0] == prev:
                for data in decode(result[2]):
                    number += 1
                    if data["seq"] != number - 1:  # all else about the line was checked by the worker
                        raise line_error(number, data, data["prev"])
                    yield number, data
                prev = result[1]
            else:
                number, prev = yield from _sequential(path, start, end, number, prev)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # at most one chunk per worker still runs
    if tail_start < size and not allow_partial_tail:
        raise truncated(number + 1)
