"""`aiperf-runner run --workload llm --backend slurm` on the one-node cluster: every LLM trial attempt is a SLURM
job (the ids the backend records, as sacct lists them), trials finish, run.json records the backend as an image
run does, nothing of the run is left in the queue, and `verify` passes the run's integrity with the LLM checks.

The run is stopped with SIGTERM (a scheduler's stop: the log closed in order) once a trial has finished and the
next one has started, not at a fixed duration: with the other test stream beside it, a 40-s run once finished
no trial."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.slurm.cluster import (
    finish,
    queue,
    read_events,
    require_accounting,
    run_tag,
    sacct,
    start_run,
    verify_ok,
    wait_until,
)

pytest.importorskip("torch")
LLM_MAX_S = 300  # the run's duration, never reached: a seed trial takes about 8 s on one core


def _after_a_finished_trial(run_dir: Path) -> bool:
    """A trial has finished and a later one has started (no launch is in flight for the one slot)."""
    kinds = [e["type"] for e in read_events(run_dir)]
    return "trial_finished" in kinds and "trial_started" in kinds[kinds.index("trial_finished"):]


def _jobs(run_dir: Path) -> dict[tuple[str, int], str]:
    """{(trial, attempt): SLURM job id} of every attempt the backend submitted (trials/<id>/slurm-<N>.jobid)."""
    return {(p.parent.name, int(p.stem.split("-")[1])): p.read_text().strip()
            for p in run_dir.glob("trials/*/slurm-*.jobid")}


def test_an_llm_run_with_slurm_runs_its_trials_as_jobs_and_verifies(one_node: Path, tmp_path: Path) -> None:
    require_accounting(one_node)
    run_dir = tmp_path / "run"
    proc = start_run(one_node, run_dir, "--workload", "llm", "--preset", "llm-smoke", "--slots", "1",
                     "--devices-per-slot", "1", "--duration", f"{LLM_MAX_S}s")
    wait_until(lambda: _after_a_finished_trial(run_dir), LLM_MAX_S - 60, "a finished trial", proc)
    proc.send_signal(signal.SIGTERM)
    out = finish(proc, 120)
    assert "backend slurm" in out and "finished (stopped)" in out, out[-2000:]
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["config"]["backend"] == "slurm" and run_json["system"]["slurm"]["partition"]
    assert (run_json["slots"], run_json["devices_per_slot"]) == (1, 1)

    events = read_events(run_dir)
    started = [(e["trial"], e["attempt"]) for e in events if e["type"] == "trial_started"]
    finished = [(e["trial"], e["attempt"]) for e in events if e["type"] == "trial_finished"]
    assert finished and events[-1]["type"] == "run_finished", [e["type"] for e in events]
    jobs = _jobs(run_dir)
    assert set(started) == set(jobs), (started, jobs)  # every attempt the log starts is a job, and no other
    tag = run_tag(run_dir)
    for (trial, attempt), job_id in jobs.items():
        name, state = sacct(one_node, job_id, name=tag + trial)[job_id]
        assert name == tag + trial
        # A finished attempt's job completed; the one the run's end stopped was cancelled.
        assert state == "COMPLETED" if (trial, attempt) in finished else state in ("CANCELLED", "FAILED"), \
            (trial, attempt, job_id, state)
    assert not [n for n, _ in queue(one_node).values() if n.startswith(tag)]  # nothing of the run left queued

    report = verify_ok(run_dir)  # exit 0, integrity OK
    checks = {c["name"]: c["passed"] for c in report["checks"]}
    assert report["workload"] == "llm" and report["trials_finished"] == len(finished)
    assert checks["integrity.lifecycle"] and checks["integrity.flops"] and checks["validity.trials"]
    assert checks["plausibility.slot_exclusive"] and checks["plausibility.concurrency"]
