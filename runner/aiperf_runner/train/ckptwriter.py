"""Rank 0's per-epoch checkpoint, written while the next epoch trains.

The trial program must not log an epoch before a checkpoint that holds it is on disk (train/trial.py:
a later attempt resumes from the checkpoint and logs, once, the epoch it holds if the crash came
before its line). A synchronous save kept that order by stopping the training loop, and with it
every other rank at its next all-reduce, for a write, an fsync and a rename per epoch. Here the
loop stops only for a copy of the state in CPU memory; a thread writes the copy (same file, same
atomic rename: a crash mid-write leaves the previous checkpoint) and only then runs the epoch's
`then`, which logs it. So the order on disk is the synchronous one: checkpoint durable, then the
epoch's lines. One write at a time: the next save, and the trial's end, wait for the one in flight
and raise its error, so a failed write fails the attempt before anything later is logged.

`AIPERF_SYNC_CHECKPOINT=1` writes in the calling thread instead, as before (bench/trial_overheads.py
compares the two).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

SYNC_ENV = "AIPERF_SYNC_CHECKPOINT"


class CheckpointError(RuntimeError):
    """A checkpoint write failed (the previous checkpoint is still the one on disk)."""


def asynchronous_by_default(environ: dict[str, str] | None = None) -> bool:
    """False when the environment asks for the synchronous save."""
    return (os.environ if environ is None else environ).get(SYNC_ENV, "") in ("", "0")


def cpu_copy(obj: Any, into: Any = None) -> Any:
    """A deep copy of a state (dicts, lists, tuples, tensors) with every tensor copied to CPU memory:
    the training loop goes on changing the live tensors in place while the copy is written. A state
    dict's `_metadata` (module versions, read by load_state_dict) is kept.

    `into`: an earlier copy of the same state, no longer in use; its tensors are overwritten where
    they match (shape, dtype) rather than allocated again: copying into memory already mapped is
    several times faster than into fresh pages (a 200 MB state: 0.2-0.4 s fresh, on this kind of
    machine). CUDA tensors are copied into pinned memory without blocking, then waited for once.
    On one intra-op thread: a memory copy is as fast on one, and waking the pool's threads for each
    tensor made a 200 MB state of 4 MB tensors 5-8 times slower on a busy 2-core machine."""
    cuda: list[bool] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = _copy(obj, into, cuda)
    finally:
        torch.set_num_threads(threads)
    if cuda:
        torch.cuda.synchronize()
    return out


def _copy(obj: Any, into: Any, cuda: list[bool]) -> Any:
    if isinstance(obj, torch.Tensor):
        src = obj.detach()
        if not (isinstance(into, torch.Tensor) and into.shape == src.shape and into.dtype == src.dtype):
            into = torch.empty_like(src, device="cpu", pin_memory=src.is_cuda)
        if src.is_cuda:
            cuda.append(True)
        return into.copy_(src, non_blocking=src.is_cuda)
    if isinstance(obj, dict):
        old = into if isinstance(into, dict) else {}
        out: dict[Any, Any] = OrderedDict() if isinstance(obj, OrderedDict) else {}
        for key, value in obj.items():
            out[key] = _copy(value, old.get(key), cuda)
        metadata = getattr(obj, "_metadata", None)
        if metadata is not None:
            out._metadata = _copy(metadata, None, cuda)  # type: ignore[attr-defined]
        return out
    if isinstance(obj, list | tuple):
        old_items = list(into) if isinstance(into, list | tuple) and len(into) == len(obj) else [None] * len(obj)
        items = [_copy(v, o, cuda) for v, o in zip(obj, old_items, strict=True)]
        return items if isinstance(obj, list) else tuple(items)
    return obj  # numbers, strings, None: immutable


class CheckpointWriter:
    """One trial attempt's checkpoint writes (rank 0). `write(path, state)` writes atomically.

    One thread for the attempt, started with the writer: a job handed to it is a queue entry,
    where a thread started per save would hold the training loop in its start handshake until it
    gave up the interpreter lock (milliseconds, as long as a small model's whole write)."""

    def __init__(self, path: Path, write: Callable[[Path, dict[str, Any]], None], *, asynchronous: bool) -> None:
        self.path, self._write, self.asynchronous = Path(path), write, asynchronous
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None
        self._snapshot: dict[str, Any] | None = None  # the last copy, its tensors reused by the next
        if asynchronous:  # the thread started now, before the first epoch, not in its save
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-writer")
            self._pool.submit(lambda: None).result()
        self.writes_s: list[float] = []  # each write's own seconds (in the thread when asynchronous)

    @property
    def mode(self) -> str:
        return "async" if self.asynchronous else "sync"

    def save(self, state: dict[str, Any], then: Callable[[], None]) -> float:
        """Write `state`, then call `then` (log the epoch it holds); returns the seconds spent waiting
        for the previous write. Asynchronous: returns once the state is copied. Raises CheckpointError
        where the previous write failed (nothing is written or logged then)."""
        t0 = time.perf_counter()
        self.wait()
        waited = time.perf_counter() - t0
        if not self.asynchronous:
            self._write_then(state, then)
            return waited
        # The previous copy is free once its write is done (waited for above): reused.
        snapshot = self._snapshot = cpu_copy(state, into=self._snapshot)
        if self._pool is None:  # closed, and saving again
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-writer")
        self._pending = self._pool.submit(self._write_then, snapshot, then)
        return waited

    def _write_then(self, state: dict[str, Any], then: Callable[[], None]) -> None:
        t0 = time.perf_counter()
        self._write(self.path, state)
        self.writes_s.append(time.perf_counter() - t0)
        then()

    def wait(self) -> None:
        """Until the write in flight (if any) is done and its epoch logged; CheckpointError if it failed."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        error = pending.exception()
        if error is not None:
            raise CheckpointError(f"writing {self.path.name} failed: {type(error).__name__}: {error}") from error

    def close(self) -> BaseException | None:
        """`wait`, and the thread ended, on the way out of the attempt: the error, if the last write
        failed, returned rather than raised (a failed attempt's own error is the one reported)."""
        try:
            self.wait()
        except CheckpointError as exc:
            return exc
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        return None
