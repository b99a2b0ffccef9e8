"""`system.facts`: a run is held to what it found it ran on. A CPU machine registered as 8 x H200 (the
trials report their devices in each attempt's first epoch) or a run.json counting more accelerators
than registered is not official; the run on the hardware registered passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiperf_runner.spec.verify import verify

from devdata.runfactory import make_run, registration_of, rewrite_events

H200 = "NVIDIA H200"


def facts(report: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == "system.facts")


def reporting(path: Path, model: str) -> Path:
    """Each attempt's first epoch names its device, as the runner's trials do."""
    def edit(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen = set()
        for e in events:
            if e["type"] == "epoch_end" and (e["trial"], e["attempt"]) not in seen:
                seen.add((e["trial"], e["attempt"]))
                e["accelerators"] = {model: 1}
        return events
    rewrite_events(path, edit)
    return path


def test_the_hardware_registered_passes(tmp_path: Path) -> None:
    run = reporting(make_run(tmp_path / "cpu", trials=4).path, "cpu")
    report = verify(run, system=registration_of(run))
    assert facts(report)["passed"], facts(report)["message"]


def test_a_cpu_machine_registered_as_h200s_is_not_official(tmp_path: Path) -> None:
    run = reporting(make_run(tmp_path / "vm", trials=4).path, "cpu")
    report = verify(run, system=registration_of(run, accelerator_model=H200, accelerators_per_node=8))
    check = facts(report)
    assert not check["passed"] and report["division"] == "open"
    assert check["message"].startswith("the trials ran on 4 x cpu; the registration is registered system 1")
    assert report["system"]["accelerators_not_registered"] == ["cpu"]


def test_run_json_counting_more_than_registered(tmp_path: Path) -> None:
    run = make_run(tmp_path / "big", trials=4, accelerator_model="NVIDIA H100 80GB HBM3", accelerator_count=8).path
    report = verify(run, system=registration_of(run, accelerators_per_node=2))  # 2 nodes of 2
    assert "run.json found 8 accelerators; the registration has 4" in facts(report)["message"]
    assert facts(verify(run, system=registration_of(run)))["passed"]


def test_a_registration_larger_than_the_run(tmp_path: Path) -> None:
    """Rules 3.1: "Imaginary CPU @ 350GHz" x 100,000 cores, registered for a 2-core run, fails on each fact,
    and its peak is counted at the rules' clock, not 350 GHz; under 3.0 only the clock was read."""
    run = reporting(make_run(tmp_path / "vm", trials=4).path, "cpu")
    imaginary = registration_of(run, cpu_model="Imaginary CPU @ 350GHz", cpu_cores=100_000, nodes=3)
    report = verify(run, system=imaginary)
    message = facts(report)["message"]
    assert not facts(report)["passed"] and report["division"] == "open"
    assert "the run found 1 node(s); the registration has 3" in message
    assert "the run found 2 CPU cores; the registration has 300000 (3 x 100000)" in message
    assert "the run found CPU 'Synthetic CPU @ 2.00GHz'; the registration names 'Imaginary CPU @ 350GHz'" in message
    assert report["peak_flops"] == 300_000 * 3.5e9 * 64  # fp32, 64 FLOP a cycle, the rules' 3.5 GHz
    old = verify(run, system=imaginary, rules_version="3.0")
    assert facts(old)["passed"] and old["peak_flops"] == 300_000 * 350e9 * 64


def test_fewer_accelerators_than_registered(tmp_path: Path) -> None:
    run = make_run(tmp_path / "part", trials=4, accelerator_model="NVIDIA H100 80GB HBM3", accelerator_count=8).path
    report = verify(run, system=registration_of(run, accelerators_per_node=8))  # the run's 2 nodes, 8 each
    assert "run.json found 8 accelerators; the registration has 16" in facts(report)["message"]
