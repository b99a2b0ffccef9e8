"""Reservations, constraints and the probe on the two-node cluster (n1, n2): a run inside a reservation
of n2 (made with `scontrol create reservation`, which needs root) counts one slot, sends every job
there (the probe's included) and finishes; a constraint counts only the nodes with the feature; a
probe SLURM refuses stops the run before `run_started`, with the reason. About 40 s in all."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiperf_runner.backends.slurm import SlurmBackend, SlurmError
from aiperf_runner.rundir.privacy import read_hostnames

from tests.slurm.cluster import (
    TWO_NODE_CONF,
    node_states,
    read_events,
    run_tag,
    run_to_end,
    slurm,
    start_run,
    verify_ok,
    wait_until,
)

JOBCOMP = TWO_NODE_CONF.parent / "log" / "jobcomp.log"


def jobs_in_log(prefix: str) -> list[dict[str, str]]:
    """The completion log's records of the jobs whose name starts with `prefix`."""
    records = [dict(re.findall(r"(\w+)=(\S*)", line)) for line in JOBCOMP.read_text().splitlines()]
    return [r for r in records if r.get("Name", "").startswith(prefix)]


@pytest.fixture
def reservation(two_node: Path) -> Iterator[str]:
    """A reservation of n2 for ten minutes, once sinfo shows n2 `reserved` (SLURM marks it within ~15 s)."""
    name = f"aiperf-test-{os.getpid()}"
    slurm(two_node, "scontrol", "create", "reservation", f"ReservationName={name}", "Nodes=n2", "StartTime=now",
          "Duration=10", "Users=root")
    try:
        wait_until(lambda: node_states(two_node).get("n2") == "reserved", 40, "n2 shown reserved by sinfo", every=1)
        yield name
    finally:
        slurm(two_node, "scontrol", "delete", f"ReservationName={name}", check=False)


def test_a_run_inside_a_reservation(two_node: Path, reservation: str, tmp_path: Path) -> None:
    assert [s.nodes for s in SlurmBackend(tmp_path / "a", probe=False).slots()] == [("n1",)]  # n2 is reserved
    inside = SlurmBackend(tmp_path / "b", reservation=reservation, probe=False)
    assert [s.nodes for s in inside.slots()] == [("n2",)]
    run_dir = tmp_path / "run"
    probe_name = f"aiperf.{SlurmBackend(run_dir).tag}.probe"  # the probe runs before run.json names the run
    run_to_end(two_node, run_dir, "--preset", "smoke", "--duration", "12s", "--reservation", reservation,
               "--trial-module", "tests.runner.fake_trial", FAKE_EPOCH_S="1")
    events = read_events(run_dir)
    assert events[0]["type"] == "run_started" and events[0]["slots"] == 1
    started = [e for e in events if e["type"] == "trial_started"]
    assert started and all(e["nodes"] == [read_hostnames(run_dir)["n2"]] for e in started)  # its pseudonym
    assert f"#SBATCH --reservation={reservation}" in (run_dir / "trials" / "t0000" / "slurm-1.sh").read_text()
    facts = json.loads((run_dir / "run.json").read_text())["system"]["slurm"]
    assert facts["reservation_used"] and facts["probe"] == "ok" and facts["usable_nodes"] == 1
    assert reservation not in (run_dir / "run.json").read_text()  # its name stays in local/private.json
    # Every job of the run, the probe first, ran on n2 inside the reservation (but one the end of the
    # run cancelled while it waited to start, which ran nowhere).
    jobs = jobs_in_log(probe_name) + jobs_in_log(run_tag(run_dir))
    assert jobs[0]["Name"] == probe_name and len(jobs) >= len(started) + 1, jobs
    assert all(j["ReservationName"] == reservation for j in jobs), jobs
    assert all(j["NodeList"] == "n2" or (j["NodeList"] == "(null)" and j["JobState"] == "CANCELLED") for j in jobs), jobs
    verify_ok(run_dir)


def test_a_constraint_counts_only_nodes_with_the_feature(two_node: Path, tmp_path: Path) -> None:
    slurm(two_node, "scontrol", "update", "NodeName=n2", "AvailableFeatures=aiperfbeta", "ActiveFeatures=aiperfbeta")
    try:
        for constraint in ("aiperfbeta", "nothing|aiperfbeta"):
            assert [s.nodes for s in SlurmBackend(tmp_path, constraint=constraint, probe=False).slots()] == [("n2",)]
        probed = SlurmBackend(tmp_path / "p", constraint="aiperfbeta")
        assert probed.probe_node().get("cpu_model")
        probe_jobs = jobs_in_log(f"aiperf.{probed.tag}.probe")
        assert probe_jobs and probe_jobs[-1]["NodeList"] == "n2", probe_jobs
        with pytest.raises(SlurmError, match="usable node"):
            SlurmBackend(tmp_path, constraint="aiperfbeta&nothing", probe=False).slots()
    finally:
        slurm(two_node, "scontrol", "update", "NodeName=n2", "AvailableFeatures=", "ActiveFeatures=", check=False)


def test_a_failing_probe_stops_the_run_before_it_starts(two_node: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # The probe gets the extra sbatch arguments too: memory no node has makes SLURM refuse it.
    proc = start_run(two_node, run_dir, "--preset", "smoke", "--duration", "1m",
                     "--backend-opt", 'extra_sbatch_args=["--mem=99999999"]')
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert "probe job failed" in out and "Memory specification" in out, out
    assert not (run_dir / "run.json").exists()
    assert not [e for e in read_events(run_dir) if e["type"] == "run_started"]
