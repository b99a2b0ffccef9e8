"""The load a run puts on the scheduler: one squeue call answers the polls of all of a run's jobs, at
most once per `squeue_interval_s` (5 s), also while a job starts; counted by a wrapper in front of
the SLURM client commands (bench/slurm_load.py). A 30-second 2-slot run of short trials, ~45 s."""

from __future__ import annotations

import os
from pathlib import Path

from bench.slurm_load import counting_wrappers
from tests.slurm.cluster import read_events, run_to_end

INTERVAL_S = 5.0


def test_squeue_calls_are_bounded(one_node: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls.log"
    calls.touch()
    counting_wrappers(tmp_path / "bin", calls)
    run_dir = tmp_path / "run"
    run_to_end(one_node, run_dir, "--preset", "smoke", "--duration", "30s", "--slots", "2",
               "--backend-opt", "exclusive=false", "--trial-module", "tests.runner.fake_trial",
               FAKE_EPOCH_S="0.5", PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    events = read_events(run_dir)
    seconds = events[-1]["t"] - events[0]["t"]
    attempts = sum(e["type"] == "trial_started" for e in events)
    names = calls.read_text().split()
    assert attempts >= 4, "too few launches to exercise the start waits"
    # One squeue per interval while jobs live, plus the shutdown's (one a second until the queue is
    # empty: up to KillWait, 5 s on the test cluster, and a few more on a loaded machine).
    assert names.count("squeue") <= seconds / INTERVAL_S + 12, (names.count("squeue"), seconds, attempts)
    # One sbatch per attempt; a launch still in flight when the run's time is up (one per slot at most) has
    # its sbatch counted and no trial_started logged (seen on a loaded CI machine: 21 sbatch, 20 attempts).
    assert attempts <= names.count("sbatch") <= attempts + 2, (names.count("sbatch"), attempts)
