"""`aiperf-runner run --backend slurm` on the one-node cluster: the smoke run, seen by SLURM while it
runs and in the job completion log after; a trial whose job is cancelled with scancel is recorded
failed and retried, and the run finishes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from aiperf_runner.rundir.privacy import read_hostnames

from tests.slurm.cluster import (
    JOBCOMP_LOG,
    finish,
    queue,
    read_events,
    run_tag,
    slurm,
    start_run,
    verify_ok,
    wait_until,
)

SMOKE_S = 30


def job_ids(run_dir: Path) -> dict[str, str]:
    """{job id: trial} of every attempt the backend submitted (trials/<id>/slurm-<N>.jobid)."""
    return {p.read_text().strip(): p.parent.name for p in run_dir.glob("trials/*/slurm-*.jobid")}


def test_smoke_run_with_slurm(one_node: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # From the directory above the run, `--out run`: relative paths must reach sbatch correctly.
    proc = start_run(one_node, run_dir, "--preset", "smoke", "--duration", f"{SMOKE_S}s", cwd=tmp_path)
    seen: dict[str, str] = {}  # job id -> name, as squeue lists them while the run goes on
    try:
        tag = wait_until(lambda: (run_dir / "run.json").exists() and run_tag(run_dir), 60, "run.json", proc)

        def jobs_of_run() -> bool:
            seen.update({i: n for i, (n, _) in queue(one_node).items() if n.startswith(tag)})
            return proc.poll() is not None

        wait_until(jobs_of_run, SMOKE_S + 120, "the end of the run", every=0.5)
        out = finish(proc, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert seen, "squeue never showed a job of the run"
    assert all(re.fullmatch(re.escape(tag) + r"t\d{4}", name) for name in seen.values())
    submitted = job_ids(run_dir)
    assert set(seen) <= set(submitted)
    # Afterwards: nothing of the run in the queue, every job in the completion log.
    assert not [n for n, _ in queue(one_node).values() if n.startswith(tag)]
    log = JOBCOMP_LOG.read_text()
    for job_id, trial in submitted.items():
        assert re.search(rf"JobId={job_id} .*Name={re.escape(tag + trial)} ", log), f"job {job_id} not in {JOBCOMP_LOG}"
    events = read_events(run_dir)
    assert events[-1]["type"] == "run_finished" and "run finished" in out
    # The trial program ran in the jobs (the two-node test waits for trained epochs; here the
    # duration decides how many there are).
    assert "process(es) on cpu" in (run_dir / "trials" / "t0000" / "stdout.log").read_text()
    started = [e for e in events if e["type"] == "trial_started"]
    node = slurm(one_node, "sinfo", "-h", "-N", "-o", "%N").split()[0]
    pseudonym = read_hostnames(run_dir)[node]  # the log names the node by its pseudonym (rundir/privacy.py)
    assert started and all(e["nodes"] == [pseudonym] for e in started)
    verify_ok(run_dir)


def test_scancel_of_a_running_trial_is_recorded_and_retried(one_node: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = start_run(one_node, run_dir, "--preset", "smoke", "--duration", "20s",
                     "--trial-module", "tests.runner.fake_trial", FAKE_EPOCH_S="5")
    try:
        # The first trial's job runs (its script has started): cancel it behind the runner's back.
        nodes_file = run_dir / "trials" / "t0000" / "slurm-1.nodes"
        wait_until(nodes_file.exists, 60, "the first trial's job to start", proc)
        job_id = (run_dir / "trials" / "t0000" / "slurm-1.jobid").read_text().strip()
        subprocess.run(["scancel", job_id], check=True, env={"SLURM_CONF": str(one_node), "PATH": "/usr/bin:/bin"})

        def retried() -> bool:
            return any(e["type"] == "trial_started" and e["trial"] == "t0000" and e["attempt"] == 2
                       for e in read_events(run_dir))

        wait_until(retried, 60, "the retry of t0000", proc)
        finish(proc, 90)
    finally:
        if proc.poll() is None:
            proc.kill()
    events = read_events(run_dir)
    failed = [e for e in events if e["type"] == "trial_failed" and e["trial"] == "t0000" and e["attempt"] == 1]
    assert len(failed) == 1 and failed[0]["retry"] is True
    assert "cancelled" in failed[0]["error"] and f"SLURM job {job_id}" in failed[0]["error"]
    assert events[-1]["type"] == "run_finished" and events[-1]["reason"] == "duration"
    second = (run_dir / "trials" / "t0000" / "slurm-2.jobid").read_text().strip()
    assert second != job_id
    assert not [n for n, _ in queue(one_node).values() if n.startswith(run_tag(run_dir))]
    verify_ok(run_dir)
