"""A large event log read in parallel: chunks parsed and hash-checked in worker processes.

`iter_scans(path, workers, limits=...)` yields the log's lines checked exactly as
`eventlog.iter_events` checks them (same lines, same LogError at the same first bad line), for logs
of gigabytes, as scanned chunks (`epochscan.Chunk`: plain epochs as compact rows, every other line
as its dict; spec/fastfold.py folds them) or, where a chunk is damaged, as `(line, event)` pairs read
here. `iter_records(path, workers)` gives the same as `(line, event)` pairs throughout.

The file is cut at newlines into chunks of `CHUNK` bytes; each worker scans its chunk
(`epochscan.scan_chunk`: msgspec, the hash chain and sequence numbers inside the chunk) and sends
it back as msgpack, compact and fast to read. This process joins the boundary links (a chunk's
first `prev` must be the digest of the previous chunk's last line, its first `seq` the line count
so far); a chunk with anything wrong in it is read again here with `eventlog.check_lines`, which
raises the exact error. At most `workers + 1` chunks are in flight (workers: `MAX_WORKERS` at
most), so memory stays bounded whatever the log's size.

Where processes cannot be started (a daemonic worker, limits) or a worker dies, chunks are scanned
in this process; so is a log under `MIN_PARALLEL` bytes.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgspec

from .epochscan import Chunk, EpochLimits, Scan, decode_records, scan_chunk
from .eventlog import GENESIS, check_lines, iter_events, truncated
from .procpool import SharedPool, process_pool

CHUNK = 32 << 20
"""Bytes per chunk (about 100,000 lines of a typical log). The fold's work per chunk grows with the
trials it names (a few thousand at most: those running at once), so larger chunks cost it less per
line; a worker holds about four times a chunk while it scans one."""
MIN_PARALLEL = 64 << 20
"""Logs smaller than this are read in this process (starting workers costs more than it saves)."""
MAX_WORKERS = 4
"""Readers at most; with `workers + 1` chunks in flight (each sent back as about half its size),
this process holds a few hundred MB of them at most, besides the fold's own state."""


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


def _joined(scan: Scan, number: int, prev: str) -> Chunk | None:
    """The chunk a clean scan is, if it follows line `number` whose digest is `prev`."""
    if not (scan.clean and scan.first_prev == prev) or scan.first_seq != number or scan.rows is None:
        return None
    try:
        records = decode_records(scan.records)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return Chunk(number + 1, scan.lines, prev, scan.digests, [off for off, _ in records], [d for _, d in records],
                 scan.rows, scan.trials)


def iter_scans(path: str | Path, workers: int | None = None, *, limits: EpochLimits | None = None,
               allow_partial_tail: bool = False, chunk: int | None = None, min_parallel: int | None = None,
               shared: SharedPool | None = None) -> Iterator[Chunk | tuple[int, dict[str, Any]]]:
    """Every line of the log in order, checked as `eventlog.iter_events` checks them: scanned chunks,
    or `(line number, event)` for the lines of a damaged chunk (up to the LogError they raise).

    `workers`: processes scanning chunks of `chunk` bytes (defaults: one per CPU, at most
    `MAX_WORKERS`; `CHUNK`). With fewer than 2, or a log under `min_parallel` bytes (default
    `MIN_PARALLEL`), chunks are scanned in this process. `limits`: the audit's per-epoch checks
    (epochscan.EpochLimits); an epoch that fails one is sent as its dict. `shared`: a pool to use
    (its owner ends it), instead of one made and ended here.
    """
    path = Path(path)
    size = path.stat().st_size
    workers = min(workers if workers is not None else (os.cpu_count() or 1), MAX_WORKERS)
    small = size < (MIN_PARALLEL if min_parallel is None else min_parallel)
    if workers < 2 or small:
        pool = None
    else:
        pool = shared.get() if shared is not None else process_pool(workers)
    bounds, tail_start = _bounds(path, size, chunk or CHUNK)
    number, prev = 0, GENESIS
    pending: deque[tuple[tuple[int, int], Future[Scan]]] = deque()
    todo = iter(bounds)

    def submit() -> None:
        nxt = next(todo, None)
        if nxt is not None and pool is not None:
            try:
                pending.append((nxt, pool.submit(scan_chunk, str(path), *nxt, limits)))
            except Exception:  # noqa: BLE001 - no processes after all: the rest is scanned here
                for _ in todo:
                    pass

    try:
        for _ in range(workers + 1 if pool is not None else 0):  # one waiting per worker, besides the next
            submit()
        for start, end in bounds:
            result: Scan | None = None
            if pending and pending[0][0] == (start, end):
                try:
                    result = pending.popleft()[1].result()
                except Exception:  # noqa: BLE001 - a worker died: this chunk is scanned here
                    result = None
                submit()
            if result is None:
                result = scan_chunk(str(path), start, end, limits)
            chunk_ = _joined(result, number, prev)
            if chunk_ is not None:
                yield chunk_
                number += result.lines
                prev = result.last_digest or prev
            else:
                number, prev = yield from _sequential(path, start, end, number, prev)
    finally:
        for _, future in pending:  # left by an error or by the caller stopping early
            future.cancel()
        if pool is not None and shared is None:
            pool.shutdown(wait=True, cancel_futures=True)  # at most one chunk per worker still runs
    if tail_start < size and not allow_partial_tail:
        raise truncated(number + 1)


def iter_records(path: str | Path, workers: int | None = None, *, allow_partial_tail: bool = False,
                 chunk: int | None = None, min_parallel: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, event) of every line of the log, checked as `eventlog.iter_events` checks them
    (`iter_scans`, with the plain epochs' dicts rebuilt: equal to `json.loads`'s, keys sorted)."""
    for item in iter_scans(path, workers, allow_partial_tail=allow_partial_tail, chunk=chunk,
                           min_parallel=min_parallel):
        if isinstance(item, Chunk):
            for off, data in item.events():
                yield item.first_line + off, data
        else:
            yield item


def check_log(path: str | Path, workers: int | None = None) -> int:
    """The log's lines checked as `eventlog.iter_events` checks them (LogError at the first bad
    one), a large log by `workers` processes; returns the number of lines."""
    path = Path(path)
    if path.stat().st_size < MIN_PARALLEL:
        return sum(1 for _ in iter_events(path))
    lines = 0
    for item in iter_scans(path, workers):
        lines = item.first_line + item.lines - 1 if isinstance(item, Chunk) else item[0]
    return lines
