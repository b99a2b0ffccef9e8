"""Where an attempt's time goes before and between its epochs, as lines of the trial's `stdout.log`.

Rank 0 of the trial program prints one line per fact, `aiperf-timing {json}`:

    {"kind": "start", "attempt", "launched_at", "process_at", "ready_at", "first_step_at", "startup_s"}
    {"kind": "epoch", "attempt", "epoch", "train_s", "val_s", "checkpoint_s", "checkpoint_wait_s", "checkpoint"}
    {"kind": "end", "attempt", "checkpoint_s", "writes_s"}

`launched_at` is the controller's clock when it launched the attempt (`AIPERF_LAUNCHED_AT` in the
attempt's environment; the process's own start where the program was started by hand), `process_at`
the trial process's start (a zygote's fork, a fresh interpreter, a SLURM task), `ready_at` the model,
optimizer and data built, `first_step_at` the first optimizer step done; `startup_s` is
`first_step_at - launched_at`. Per epoch: `train_s` the training loop, `val_s` the evaluation of the
validation set (both with the ranks' sums), `checkpoint_s` what the checkpoint cost the training loop
on rank 0 (the other ranks wait as long, at their next gradient all-reduce), `checkpoint_wait_s` the
part of it spent waiting for the previous write, `checkpoint` how it was written (`async`/`sync`).
At the end: `checkpoint_s` the loop's wait for the last write, `writes_s` each write's own seconds.

These are not in the signed log: per-epoch fields on every `epoch_end` line would send every line of
a large log off verification's fast path (spec/epochscan.py), and none of them is scored. The raw
output is never bundled; only its masked tail is (rundir/publish.py). Torch-free: the controller
names the variable, the bench reads the lines.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

LAUNCHED_AT_ENV = "AIPERF_LAUNCHED_AT"
"""The controller's `time.time()` when it launched the attempt, in the attempt's environment."""
PREFIX = "aiperf-timing "


def launched_at(environ: dict[str, str] | None = None) -> float | None:
    """The launch time the controller passed, or None."""
    value = (os.environ if environ is None else environ).get(LAUNCHED_AT_ENV)
    try:
        return float(value) if value else None
    except ValueError:
        return None


def process_started_at(pid: int | str = "self") -> float | None:
    """When the process started (UNIX seconds), from /proc; None where /proc does not say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks after boot
        # Against the uptime, not /proc/stat's btime: that one is whole seconds.
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def line(kind: str, **fields: Any) -> str:
    return PREFIX + json.dumps({"kind": kind, **fields}, separators=(",", ":"))


def read(path: str | Path) -> Iterator[dict[str, Any]]:
    """The timing lines of a trial's stdout.log, in order (other lines, and broken ones, skipped)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return
    for raw in text.splitlines():
        if raw.startswith(PREFIX):
            try:
                fact = json.loads(raw[len(PREFIX):])
            except ValueError:
                continue
            if isinstance(fact, dict):
                yield fact


class AttemptTimes:
    """Rank 0's record of one attempt: prints the lines as the facts become known (`emit`: print)."""

    def __init__(self, attempt: int, emit: Callable[[str], None] | None = None) -> None:
        self.attempt = attempt
        self.process_at = process_started_at()
        self.launched_at = launched_at() or self.process_at
        self.ready_at: float | None = None
        self.first_step_at: float | None = None
        self._emit = emit or (lambda text: print(text, flush=True))

    def ready(self) -> None:
        self.ready_at = time.time()

    def first_step(self) -> None:
        """The first optimizer step is done (the caller has waited for the device)."""
        self.first_step_at = time.time()
        start = self.launched_at
        self._emit(line("start", attempt=self.attempt, launched_at=start, process_at=self.process_at,
                        ready_at=self.ready_at, first_step_at=self.first_step_at,
                        startup_s=None if start is None else round(self.first_step_at - start, 6)))

    def epoch(self, epoch: int, *, train_s: float, val_s: float, checkpoint_s: float, checkpoint_wait_s: float,
              checkpoint: str) -> None:
        self._emit(line("epoch", attempt=self.attempt, epoch=epoch, train_s=round(train_s, 6), val_s=round(val_s, 6),
                        checkpoint_s=round(checkpoint_s, 6), checkpoint_wait_s=round(checkpoint_wait_s, 6),
                        checkpoint=checkpoint))

    def end(self, *, checkpoint_s: float, writes_s: list[float]) -> None:
        self._emit(line("end", attempt=self.attempt, checkpoint_s=round(checkpoint_s, 6),
                        writes_s=[round(w, 6) for w in writes_s]))
