"""The slurm backend beyond the conformance suite, on the one-node cluster: what a killed controller
leaves behind is found again (by job id on resume, by job name at shutdown), and the shutdown
cancels every attempt with one scancel."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from aiperf_runner.backends.slurm import CANCELLED_STATUS, SlurmBackend

from bench.slurm_load import counting_wrappers
from tests.backends.test_conformance import WAIT_S, spec_for, wait_for
from tests.slurm.cluster import queue, require_accounting, sacct, wait_until


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


@pytest.mark.parametrize("stop", ["shutdown", "cancel each, then shutdown"])
def test_shutdown_cancels_every_attempt_with_one_scancel(one_node: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, stop: str) -> None:
    """Three attempts (two running on the node's two CPUs, one pending): one scancel for all of
    them, whether the shutdown finds them running or the controller's stop cancelled each first
    (`cancel()` shares one scancel), and nothing of the run left in the queue after."""
    calls = tmp_path / "calls.log"
    calls.touch()
    counting_wrappers(tmp_path / "bin", calls)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    backend = SlurmBackend(tmp_path / "run", slots=3, exclusive=False, probe=False)
    specs = [spec_for(backend, f"t000{i}", "sleep") for i in range(3)]
    handles = [backend.launch(spec, slot) for spec, slot in zip(specs, backend.slots(), strict=True)]
    names = {backend.job_name(spec.trial_id) for spec in specs}
    wait_until(lambda: sum((s.trial_dir / "out" / "started").exists() for s in specs) >= 2, WAIT_S,
               "two attempts running")
    started = time.monotonic()
    if stop != "shutdown":
        for handle in handles:
            handle.cancel()
        assert all(h.poll() == CANCELLED_STATUS for h in handles)  # over at once, the scancel to come
    backend.shutdown()
    seconds = time.monotonic() - started
    assert calls.read_text().split().count("scancel") == 1, calls.read_text()
    assert all(h.poll() == CANCELLED_STATUS for h in handles)
    assert not names & {name for name, _ in queue(one_node).values()}, queue(one_node)
    assert seconds < backend.shutdown_wait_s, seconds
