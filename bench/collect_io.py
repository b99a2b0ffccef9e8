"""File-system work of collecting trial events, before and after backends/filewatch.py, in one run.

N real trial processes (the local backend) each append an `epoch_end` line to their
`trials/<id>/events.jsonl` every `--epoch-s` seconds (with a per-trial offset). A loop that does
what the controller's does (Controller._wait_for_news and _check_running: the backend's
`wait_changed`, then TrialTail.read and poll of each attempt with news, or of every attempt when the
backend cannot tell) collects them, three ways:

  poll-all   the old way: every attempt's log is looked at every POLL_S (0.1 s)
  inotify    the local backend now: inotify wakes the loop; a 10-s back-off is its safety net
  back-off   stat with back-off only (0.1 s after a change, doubling to 2 s): what slurm and
             slurm-steps get for trials writing on other nodes of a shared file system

Printed per way: stat and open calls on files under trials/ per trial per minute (counted by
wrapping os.stat and an audit hook on `open` in this process: the controller's side, the one whose
calls reach Lustre's or GPFS's servers from one client for every trial) and the reaction time
from a line's write (its `t`) to the loop reading it (median, 95th percentile, max).

    python bench/collect_io.py                       # 8 trials, 40 s per way, a line every 10 s
    python bench/collect_io.py --trials 32 --seconds 120 --epoch-s 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiperf_runner.backends.base import Backend, LaunchSpec, TrialHandle
from aiperf_runner.backends.filewatch import FileWatch
from aiperf_runner.backends.local import LocalBackend
from aiperf_runner.run.controller import MIN_TICK_S, POLL_S
from aiperf_runner.run.trialtail import TrialTail

WRITER = """
import json, sys, time
path, trial, every, offset, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
start = time.time()
time.sleep(offset)
epoch = 0
while time.time() - start < seconds:
    epoch += 1
    with open(path, "a") as fh:
        fh.write(json.dumps({"type": "epoch_end", "trial": trial, "attempt": 1, "epoch": epoch, "t": time.time()}) + "\\n")
    time.sleep(every)
"""


class Counter:
    """stat and open calls on paths under a directory, made by this process."""

    def __init__(self) -> None:
        self.root = ""
        self.stats = self.opens = 0
        self._stat = os.stat

        def counted_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            if self.root and str(path).startswith(self.root):
                self.stats += 1
            return self._stat(path, *args, **kwargs)

        os.stat = counted_stat  # type: ignore[assignment]  # Path.stat and filewatch call os.stat
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and self.root and isinstance(args[0], str | Path) and str(args[0]).startswith(self.root):
            self.opens += 1


class PollAll(LocalBackend):
    """The local backend as it was: it cannot tell which attempt has news."""

    def wait_changed(self, timeout: float) -> set[TrialHandle] | None:
        return Backend.wait_changed(self, timeout)


class BackOffOnly(LocalBackend):
    """The local backend with the watch slurm and slurm-steps have for writes on other nodes."""

    def __init__(self, run_dir: Path, **options: Any) -> None:
        super().__init__(run_dir, **options)
        self._watch = FileWatch(ended=lambda h: h.poll() is not None, use_inotify=False)


def collect(backend: LocalBackend, run_dir: Path, trials: int, epoch_s: float, seconds: float,
            counter: Counter) -> dict[str, float]:
    handles: dict[TrialHandle, TrialTail] = {}
    for i in range(trials):
        trial = f"t{i:04d}"
        trial_dir = run_dir / "trials" / trial
        trial_dir.mkdir(parents=True)
        argv = (sys.executable, "-c", WRITER, str(trial_dir / "events.jsonl"), trial, str(epoch_s),
                str(epoch_s * i / trials), str(seconds))
        spec = LaunchSpec(trial, 1, argv, trial_dir, trial_dir / "stdout.log", trial_dir / "stderr.log")
        handle = backend.launch(spec, backend.slots()[i])
        handles[handle] = TrialTail(trial_dir / "events.jsonl", trial)
    counter.root = str(run_dir / "trials")
    counter.stats = counter.opens = 0
    lags: list[float] = []
    started = time.monotonic()
    while handles:
        # Controller._wait_for_news
        t0 = time.monotonic()
        news = backend.wait_changed(POLL_S)
        rest = MIN_TICK_S - (time.monotonic() - t0)
        if news is not None and rest > 0:
            time.sleep(rest)
            news |= backend.wait_changed(0.0) or set()
        # Controller._check_running
        for handle in list(handles) if news is None else [h for h in news if h in handles]:
            tail = handles[handle]
            lags.extend(time.time() - line["t"] for line in tail.read())
            if handle.poll() is not None:
                lags.extend(time.time() - line["t"] for line in tail.read())
                del handles[handle]
    minutes = (time.monotonic() - started) / 60
    counter.root = ""
    lags.sort()
    return {"stat": counter.stats / minutes / trials, "open": counter.opens / minutes / trials,
            "lines": len(lags), "median_ms": 1000 * statistics.median(lags),
            "p95_ms": 1000 * lags[int(0.95 * (len(lags) - 1))], "max_ms": 1000 * lags[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--epoch-s", type=float, default=10.0)
    args = parser.parse_args()
    counter = Counter()
    print(f"{args.trials} trials, a line every {args.epoch_s:g} s each, {args.seconds:g} s per way")
    print(f"{'way':10} {'stat/min/trial':>15} {'open/min/trial':>15} {'lines':>6} {'median ms':>10} "
          f"{'p95 ms':>8} {'max ms':>8}")
    for name, cls in (("poll-all", PollAll), ("inotify", LocalBackend), ("back-off", BackOffOnly)):
        with tempfile.TemporaryDirectory(prefix="aiperf-collect-") as tmp:
            run_dir = Path(tmp)
            backend = cls(run_dir, slots=args.trials, device_type="cpu")
            try:
                r = collect(backend, run_dir, args.trials, args.epoch_s, args.seconds, counter)
            finally:
                backend.shutdown()
        print(f"{name:10} {r['stat']:15.1f} {r['open']:15.1f} {r['lines']:6d} {r['median_ms']:10.1f} "
              f"{r['p95_ms']:8.1f} {r['max_ms']:8.1f}", flush=True)


if __name__ == "__main__":
    main()
