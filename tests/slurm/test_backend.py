"""The slurm backend beyond the conformance suite, on the one-node cluster: what a killed controller
leaves behind is found again (by job id on resume, by job name at shutdown)."""

from __future__ import annotations

from pathlib import Path

from aiperf_runner.backends.slurm import SlurmBackend

from tests.backends.test_conformance import spec_for, wait_for
from tests.slurm.cluster import queue, require_accounting, sacct


def test_jobs_of_a_lost_controller_are_cancelled(one_node: Path, tmp_path: Path) -> None:
    require_accounting(one_node)
    run_dir = tmp_path / "run"
    old = SlurmBackend(run_dir, slots=2, exclusive=False, probe=False)
    specs = [spec_for(old, f"t000{i}", "sleep") for i in range(2)]
    for spec, slot in zip(specs, old.slots(), strict=True):
        old.launch(spec, slot)
    for spec in specs:
        wait_for(spec.trial_dir / "out" / "started")
    names = {old.job_name(s.trial_id) for s in specs}
    assert names <= {name for name, _ in queue(one_node).values()}
    # The controller that launched them is gone (`old` is dropped without shutdown); a new one takes over.
    new = SlurmBackend(run_dir, slots=2, exclusive=False, probe=False)
    note = new.reap_orphan(specs[0].trial_dir)
    assert note and "cancelled SLURM job" in note
    assert new.reap_orphan(tmp_path / "nowhere") is None
    new.shutdown()  # the other one goes by its name (the run's prefix)
    assert not names & {name for name, _ in queue(one_node).values()}
    # Once squeue has forgotten a job, its end is read from sacct (or, without accounting, the job
    # completion log): here sacct's, which lists the job.
    job_id = (specs[1].trial_dir / "slurm-1.jobid").read_text().strip()
    assert sacct(one_node, job_id, name=new.job_name("t0001"))[job_id] == (new.job_name("t0001"), "CANCELLED")
    assert new.final_state(job_id, "t0001") == {"state": "CANCELLED", "reason": ""}
