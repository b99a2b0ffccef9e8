"""Load a run puts on SLURM and on the shared filesystem: client calls per minute and main-log bytes.

Runs a real short benchmark with the slurm backend (default: 2 slots sharing the nodes, 2 minutes,
the smoke preset and the real trial program) against the cluster of $SLURM_CONF, with a counting
wrapper in front of every SLURM client command (squeue, sbatch, scancel, sinfo, srun, sacct,
scontrol) on the controller's PATH, and prints the calls of each per minute of run time and the
main log's bytes per minute.

    SLURM_CONF=... .venv/bin/python bench/slurm_load.py [--slots 2] [--duration 2m] [--fake-epoch-s S]
        [--before REV] [--keep]

--before REV first runs the same measurement with the runner of commit REV (checked out in a
temporary `git worktree`, removed after), then with the working tree's, and prints both sides and
their ratio: e.g. `--before c50872a^`, the code before one squeue call per `squeue_interval_s`.
--fake-epoch-s runs tests.runner.fake_trial (epochs of S seconds) instead of the real trial program,
for a controller-only measurement. Run it from the repository root (the runner of the working tree,
put first on PYTHONPATH, is the code measured; the jobs inherit that environment). Without a SLURM cluster it says so and exits 0 (`make bench` runs every script here).
The squeue cadence it checks is one call per `squeue_interval_s` (5 s): 12 a minute, plus the
start and the stop.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

COMMANDS = ("squeue", "sbatch", "scancel", "sinfo", "srun", "sacct", "scontrol")


def counting_wrappers(bin_dir: Path, log: Path) -> None:
    """A script per SLURM command that appends its name to `log`, then runs the real one."""
    bin_dir.mkdir(parents=True)
    for name in COMMANDS:
        real = shutil.which(name)
        if real is None:
            continue
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\necho {name} >> "{log}"\nexec "{real}" "$@"\n')
        wrapper.chmod(0o755)


def measure(label: str, tree: Path, args: argparse.Namespace) -> dict[str, float] | None:
    """One run with the runner of `tree` (its runner/ and root first on PYTHONPATH); calls and bytes per minute."""
    work = Path(tempfile.mkdtemp(prefix="aiperf-slurm-load-"))
    calls = work / "calls.log"
    calls.touch()
    counting_wrappers(work / "bin", calls)
    run_dir = work / "run"
    # The jobs get the controller's environment (--export=ALL): the trial program is the same tree's.
    pythonpath = [str(tree / "runner"), str(tree), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PATH": f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, pythonpath))}
    argv = [sys.executable, "-m", "aiperf_runner", "run", "--backend", "slurm", "--preset", "smoke",
            "--duration", args.duration, "--slots", str(args.slots), "--backend-opt", "exclusive=false",
            "--backend-opt", "threads_per_process=1", "--out", str(run_dir), "--progress", "none"]
    if args.fake_epoch_s is not None:
        argv += ["--trial-module", "tests.runner.fake_trial"]
        env["FAKE_EPOCH_S"] = str(args.fake_epoch_s)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tree)
    if proc.returncode != 0:
        print(f"{label}: the run failed", proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
        return None
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    minutes = (events[-1]["t"] - events[0]["t"]) / 60
    names = calls.read_text().split()
    attempts = sum(e["type"] == "trial_started" for e in events)
    print(f"{label}: run of {minutes:.2f} min, {args.slots} slots, {attempts} attempts ({tree})")
    figures = {"minutes": minutes, "attempts": float(attempts)}
    for name in COMMANDS:
        figures[name] = names.count(name) / minutes
        print(f"  {name:9s} {names.count(name):5d} calls  {figures[name]:7.1f} per minute")
    size = (run_dir / "events.jsonl").stat().st_size
    figures["log_bytes"] = size / minutes
    print(f"  main log  {size} bytes  {figures['log_bytes']:7.0f} bytes per minute")
    if args.keep:
        print(f"  kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--duration", default="2m")
    parser.add_argument("--fake-epoch-s", type=float, default=None)
    parser.add_argument("--before", metavar="REV", default=None,
                        help="also measure the runner of commit REV first (a temporary git worktree)")
    parser.add_argument("--keep", action="store_true", help="keep the run directories (their paths are printed)")
    args = parser.parse_args()
    try:
        subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        print("skipped: no SLURM cluster answers sinfo (start one: scripts/slurm-cluster.sh start; set SLURM_CONF)")
        return 0
    here = Path.cwd()
    if args.before is None:
        return 0 if measure("after", here, args) else 1
    old = Path(tempfile.mkdtemp(prefix="aiperf-slurm-load-before-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(old), args.before], check=True,
                   capture_output=True)
    try:
        before = measure(f"before ({args.before})", old, args)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], check=False)
        shutil.rmtree(old.parent, ignore_errors=True)
    after = measure("after (working tree)", here, args)
    if before is None or after is None:
        return 1
    print(f"{'per minute':18s} {'before':>9s} {'after':>9s}")
    for key in ("squeue", "sbatch", "log_bytes"):
        print(f"{key:18s} {before[key]:9.1f} {after[key]:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
