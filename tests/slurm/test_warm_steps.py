"""Warm starts inside an allocation (`--backend slurm-steps --backend-opt warm_start=true`): one zygote step per
node forks every attempt of a one-node slot, so that no attempt is a job step, an interpreter or an import of
its own; cancelling, failing and the shutdown behave as with a step per attempt, and nothing is left in the
allocation. On the one-node cluster: a driver under salloc, then the controller in an sbatch job. ~60 s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO
from tests.slurm.cluster import env_for, read_events, require_accounting, sacct, verify_ok
from tests.slurm.test_steps import controller_job

DRIVER = """
import json, os, sys, time
from pathlib import Path
from aiperf_runner.backends.slurm.steps import SlurmStepsBackend
from tests.backends.test_conformance import spec_for, wait_done, wait_for
run = Path(sys.argv[1])
backend = SlurmStepsBackend(run, slots=2, probe=False, warm_start=True)
backend.prepare((sys.executable, "-m", "tests.backends.fake_trial"))
zygote_steps = sorted(backend._steps().values())
facts = spec_for(backend, "t0000", "facts", env={"FAKE_TRIAL_VAR": "x"})
rc_facts = wait_done(backend.launch(facts, backend.slots()[0]), timeout=60)
other = spec_for(backend, "t0004", "facts")
assert wait_done(backend.launch(other, backend.slots()[1]), timeout=60) == 0
failing = backend.launch(spec_for(backend, "t0001", "fail"), backend.slots()[0])
rc_fail = wait_done(failing, timeout=60)
sleeping = [spec_for(backend, f"t000{i}", "sleep") for i in (2, 3)]
handles = [backend.launch(spec, slot) for spec, slot in zip(sleeping, backend.slots())]
for spec in sleeping:
    wait_for(spec.trial_dir / "out" / "pid", timeout=60)
during = sorted(backend._steps().values())
pids = [int((s.trial_dir / "out" / n).read_text()) for s in sleeping for n in ("pid", "child.pid")]
handles[0].cancel()
cancelled = wait_done(handles[0], timeout=30)
started = time.monotonic()
backend.shutdown()
seconds = time.monotonic() - started
alive = [p for p in pids if Path(f"/proc/{p}").exists() and open(f"/proc/{p}/stat").read().split(") ")[1][0] != "Z"]
print("WARM", json.dumps({"zygote_steps": zygote_steps, "during": during, "rc_facts": rc_facts, "rc_fail": rc_fail,
                          "fail": failing.describe_failure(), "cancelled": cancelled, "seconds": seconds,
                          "polls": [h.poll() for h in handles], "alive": alive, "left": len(backend._steps()),
                          "facts": json.loads((facts.trial_dir / "out" / "facts.json").read_text()),
                          "other": json.loads((other.trial_dir / "out" / "facts.json").read_text()),
                          "stdout": facts.stdout.read_text(), "note": backend.zygote_note}))
"""


def test_attempts_are_forked_by_the_nodes_zygote_step(one_node: Path, tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    proc = subprocess.run(["salloc", "--nodes=1", "--exclusive", "--time=5", sys.executable, "-c", DRIVER,
                           str(tmp_path / "run")],
                          env=env_for(one_node), capture_output=True, text=True, timeout=240, cwd=str(REPO))
    out = proc.stdout + proc.stderr
    assert "WARM " in out, out[-3000:]
    got = json.loads(out.split("WARM ", 1)[1].splitlines()[0])
    [zygote] = got["zygote_steps"]
    assert zygote.endswith(".zygote.0") and got["during"] == [zygote], got  # no attempt is a step of its own
    assert got["note"] == "", got
    assert got["rc_facts"] == 0 and got["rc_fail"] == 3 and "exit status 3" in got["fail"], got
    assert "forked on" in got["fail"] and "forked by the warm-start step" in got["stdout"], got
    facts = got["facts"]
    assert facts["var"] == "x" and facts["slurm_step"] is not None and facts["stdin"] == "/dev/null", facts
    assert facts["sid"] == facts["pid"] and facts["name"] == "__main__"
    assert facts["cpu_set"], facts  # its slot's share of the node's two CPUs, bound to it
    assert facts["affinity"] and not set(facts["affinity"]) & set(got["other"]["affinity"]), (facts, got["other"])
    assert got["cancelled"] == -15 and got["polls"] == [-15, -15], got
    assert got["alive"] == [] and got["left"] == 0, got  # the attempts' trees and the zygote's step: all gone
    assert got["seconds"] < 30, got


def test_a_run_in_an_sbatch_job_starts_its_attempts_warm(one_node: Path, tmp_path: Path) -> None:
    """The operator's way: scripts/slurm-steps.sbatch with `--backend-opt warm_start=true`."""
    require_accounting(one_node)
    run_dir = tmp_path / "run"
    job, _ = controller_job(one_node, tmp_path, run_dir, "15s", "--backend-opt", "warm_start=true")
    out = (tmp_path / "controller.out").read_text()
    assert "run finished (duration)" in out and "start cold" not in out, out[-3000:]
    started = [e for e in read_events(run_dir) if e["type"] == "trial_started"]
    assert {e["slot"] for e in started} == {0, 1}
    logs = [p.read_text() for p in run_dir.glob("trials/*/stdout.log")]
    assert logs and all("forked by the warm-start step" in text for text in logs), logs[:1]
    steps = {name for i, (name, _) in sacct(one_node, job).items() if i.startswith(f"{job}.")}
    assert f"aiperf.{job}.zygote.0" in steps, steps
    assert not any(name.startswith(f"aiperf.{job}.t0") for name in steps), steps  # no step per attempt
    run_json = json.loads((run_dir / "run.json").read_text())
    assert str(run_json["config"]["backend_options"]["warm_start"]).lower() == "true", run_json["config"]
    verify_ok(run_dir)
