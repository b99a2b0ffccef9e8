"""Slot utilisation: the share of slot time spent inside trials (building, training, evaluating).

Runs a real short smoke benchmark (default: 2 slots, 2 minutes, local backend, the real trial
program) and measures, from its event log, the time each slot spent between `trial_started` and
the attempt's end (`trial_finished` / `trial_failed` / `trial_cancelled`) against slots x run
duration. Target: at least 97 %. The idle time is broken down into the start (run start to a
slot's first trial), the refills (a slot's attempt ended, the next not yet started) and the end.

    .venv/bin/python bench/slot_utilisation.py [--slots 2] [--duration 2m] [--run-dir RUN_DIR] [--keep]

With --run-dir, an existing run is measured instead of making a new one.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from aiperf_runner.run.state import RunState

TARGET = 0.97


def idle_breakdown(state: RunState) -> dict[str, float]:
    assert state.started_at is not None
    end = state.finished_at or state.last_t or state.started_at
    start_idle = refill_idle = end_idle = 0.0
    refills = 0
    for slot in range(state.slots):
        spans = sorted((a.started, a.ended if a.ended is not None else end)
                       for tr in state.trials.values() for a in tr.attempts if a.slot == slot)
        if not spans:
            start_idle += end - state.started_at
            continue
        start_idle += spans[0][0] - state.started_at
        for (_, prev_end), (nxt_start, _) in zip(spans, spans[1:], strict=False):
            refill_idle += max(0.0, nxt_start - prev_end)
            refills += 1
        end_idle += max(0.0, end - spans[-1][1])
    return {"start_s": start_idle, "refill_s": refill_idle, "refills": refills, "end_s": end_idle,
            "slot_seconds": state.slots * (end - state.started_at)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--duration", default="2m")
    parser.add_argument("--run-dir", type=Path, help="measure this existing run instead of making one")
    parser.add_argument("--keep", action="store_true", help="keep the run directory this script makes")
    args = parser.parse_args()

    if args.run_dir is None:
        tmp = tempfile.mkdtemp(prefix="aiperf-bench-util-")
        run_dir = Path(tmp) / "run"
        print(f"running: aiperf-runner run --preset smoke --slots {args.slots} --duration {args.duration} "
              f"--out {run_dir}", flush=True)
        done = subprocess.run([sys.executable, "-m", "aiperf_runner", "run", "--preset", "smoke",
                               "--slots", str(args.slots), "--duration", args.duration, "--out", str(run_dir),
                               "--progress", "none"], stdout=subprocess.DEVNULL)
        if done.returncode != 0:
            print(f"the run failed (exit status {done.returncode})", file=sys.stderr)
            return 1
    else:
        run_dir = args.run_dir

    state = RunState.load(run_dir)
    util = state.slot_utilisation()
    if util is None:
        print("no utilisation: the run has no trials", file=sys.stderr)
        return 1
    idle = idle_breakdown(state)
    attempts = sum(len(tr.attempts) for tr in state.trials.values())
    print(f"run {run_dir}: {state.slots} slots, {idle['slot_seconds'] / max(state.slots, 1):.1f} s, "
          f"{attempts} attempts, {state.count('finished')} trials finished")
    print(f"idle slot time: start {idle['start_s']:.2f} s, refills {idle['refill_s']:.2f} s over "
          f"{idle['refills']} refills ({idle['refill_s'] / max(idle['refills'], 1) * 1000:.0f} ms each), "
          f"end {idle['end_s']:.2f} s")
    verdict = "meets" if util >= TARGET else "BELOW"
    print(f"slot utilisation: {util:.2%} (target >= {TARGET:.0%}: {verdict})")
    if args.run_dir is None and not args.keep:
        shutil.rmtree(run_dir.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
