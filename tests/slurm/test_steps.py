"""The single-allocation mode on the one-node cluster: the controller runs inside an sbatch job
(scripts/slurm-steps.sbatch, as an operator submits it) with two slots, and every trial is a job
step of that job, seen with `squeue --steps` while the run goes and with `sacct` afterwards (the
test clusters keep accounting in slurmdbd); and a two-node slot as one step with a torchrun on each
node, under `salloc` on the two-node cluster. ~50 s."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiperf_runner.backends.slurm.steps import SlurmStepsBackend, cpus_per_node

from tests.helpers import REPO
from tests.slurm.cluster import env_for, read_events, require_accounting, sacct, slurm, verify_ok
from tests.slurm.test_launcher import launcher_files


def test_cpus_per_node() -> None:
    assert cpus_per_node("2(x3),1", 4) == [2, 2, 2, 1]
    assert cpus_per_node("8", 1) == [8]
    with pytest.raises(OSError):
        cpus_per_node("2(x2)", 3)


def test_outside_an_allocation_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(OSError, match="inside a SLURM allocation"):
        SlurmStepsBackend(tmp_path)
    with pytest.raises(ValueError, match="--reservation, --time-limit: with slurm-steps"):
        SlurmStepsBackend(tmp_path, reservation="r", time_limit="1:00:00")


def controller_job(conf: Path, tmp_path: Path, run_dir: Path, duration: str, *extra: str) -> tuple[str, dict[str, str]]:
    """scripts/slurm-steps.sbatch submitted as an operator would (two slots, the fake trial program), waited for
    until its job has left the queue: its id and the steps seen while it ran ({step id: name})."""
    env = env_for(conf, AIPERF_RUNNER=f"{sys.executable} -m aiperf_runner", FAKE_EPOCH_S="1")
    job = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", "--time=10", f"--output={tmp_path / 'controller.out'}",
         f"--chdir={REPO}", str(REPO / "scripts" / "slurm-steps.sbatch"),
         "--preset", "smoke", "--duration", duration, "--slots", "2", "--out", str(run_dir),
         "--trial-module", "tests.runner.fake_trial", *extra],
        env=env, capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    steps: dict[str, str] = {}
    deadline = time.monotonic() + 150
    try:
        while time.monotonic() < deadline:
            text = slurm(conf, "squeue", "-h", "-s", "-j", job, "-o", "%i|%j", check=False)
            steps.update(line.split("|", 1) for line in text.split() if "|" in line)
            left = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i"], env=env, capture_output=True, text=True)
            if left.returncode == 0 and not left.stdout.strip():  # not a squeue that failed to answer
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"the controller's job {job} did not end")
    finally:
        slurm(conf, "scancel", job, check=False)
    return job, steps


def test_controller_in_an_sbatch_job_runs_trials_as_steps(one_node: Path, tmp_path: Path) -> None:
    require_accounting(one_node)
    run_dir = tmp_path / "run"
    job, steps = controller_job(one_node, tmp_path, run_dir, "20s")
    out = (tmp_path / "controller.out").read_text()
    assert "run finished (duration)" in out, out[-3000:]  # not stopped by the script's --signal (5 min before the limit)
    events = read_events(run_dir)
    assert events[0]["type"] == "run_started" and events[0]["slots"] == 2
    started = [e for e in events if e["type"] == "trial_started"]
    assert {e["slot"] for e in started} == {0, 1}
    # Every attempt that started is a step of the controller's job, named after the trial and attempt.
    names = set(steps.values())
    ran = {f"aiperf.{job}.{e['trial']}.{e['attempt']}" for e in started}
    assert len(ran & names) >= 2, (ran, steps)
    assert all(i.startswith(f"{job}.") for i in steps)
    # And accounting keeps them: sacct lists each attempt as a step of the job, ended.
    accounted = sacct(one_node, job)
    assert accounted.get(job, ("", ""))[1] == "COMPLETED", accounted
    step_rows = {name: state for i, (name, state) in accounted.items() if i.startswith(f"{job}.")}
    assert ran <= set(step_rows), (ran, accounted)
    assert all(step_rows[name] in ("COMPLETED", "CANCELLED", "FAILED") for name in ran), accounted
    assert "step of SLURM job" in (run_dir / "trials" / "t0000" / "stdout.log").read_text()
    system = json.loads((run_dir / "run.json").read_text())["system"]
    assert system["slurm"]["mode"] == "steps" and system["slurm"]["probe"] == "ok"
    verify_ok(run_dir)


DRIVER = """
import sys
from pathlib import Path
from aiperf_runner.backends.slurm.steps import SlurmStepsBackend
from tests.backends.test_conformance import spec_for, wait_done
backend = SlurmStepsBackend(Path(sys.argv[1]), nodes_per_slot=2, probe=False, prologue=sys.argv[2], wrap=sys.argv[3])
[slot] = backend.slots()
print("AIPERF_RC", wait_done(backend.launch(spec_for(backend, "t0000", "ok"), slot), timeout=90), *slot.nodes)
"""


def test_a_two_node_slot_is_one_step_with_torchrun_on_each_node(two_node: Path, tmp_path: Path) -> None:
    markers, prologue, wrapper = launcher_files(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # salloc runs the driver (a stand-in controller) on this machine with the allocation's environment.
    proc = subprocess.run(["salloc", "--nodes=2", "--time=5", sys.executable, "-c", DRIVER, str(run_dir),
                           str(prologue), str(wrapper)],
                          env=env_for(two_node, MARKERS=str(markers)), capture_output=True, text=True, timeout=150,
                          cwd=str(REPO))
    assert "AIPERF_RC 0 n1 n2" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    for node in ("n1", "n2"):
        assert (markers / f"prologue.t0000.1.{node}").read_text().strip() == "n1,n2"
        wrapped = (markers / f"wrap.t0000.1.{node}").read_text()
        assert "torch.distributed.run --nnodes=2" in wrapped and "--rdzv-endpoint=127.0.0.1:" in wrapped, wrapped
        port = int(wrapped.split("--rdzv-endpoint=127.0.0.1:", 1)[1].split()[0])
        assert 20000 <= port < 30000, port  # below Linux's ephemeral ports (script.py RDZV_PORT_BASE)
    assert (run_dir / "trials" / "t0000" / "out" / "done").exists()


IFACE_DRIVER = """
import json, sys
from pathlib import Path
from aiperf_runner.backends.base import Slot
from aiperf_runner.backends.slurm.commands import SlurmError
from aiperf_runner.backends.slurm.steps import SlurmStepsBackend
from tests.backends.test_conformance import spec_for
run = Path(sys.argv[1])
backend = SlurmStepsBackend(run / "a", probe=False, rdzv_iface="lo")
node = backend.nodes[0]
print("FACTS", json.dumps(backend.launcher.facts()))
# A two-node slot's argv (the test cluster has one node: both are it; the argv is not run).
backend._slots = [two := Slot(index=0, nodes=(node, node), devices_per_node=1)]
print("ADDR", backend.rdzv_addr(node))
print("ARGV", " ".join(backend.step_argv(spec_for(backend, "t0000", "ok"), two)))
try:
    SlurmStepsBackend(run / "b", probe=False, rdzv_iface="nosuch0").rdzv_addr(node)
except SlurmError as exc:
    print("REFUSED", exc)
"""


def test_rdzv_iface_is_looked_up_on_the_slots_first_node(one_node: Path, tmp_path: Path) -> None:
    """--rdzv-iface with slurm-steps: a step on the first node finds the interface's address, which
    becomes the rendezvous; a missing interface fails the launch with the reason. ~5 s."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    proc = subprocess.run(["salloc", "--nodes=1", "--time=5", sys.executable, "-c", IFACE_DRIVER, str(tmp_path)],
                          env=env_for(one_node), capture_output=True, text=True, timeout=150, cwd=str(REPO))
    out = proc.stdout + proc.stderr
    assert json.loads(out.split("FACTS ", 1)[1].splitlines()[0])["rdzv_iface"] == "lo", out
    assert out.split("ADDR ", 1)[1].splitlines()[0] == "127.0.0.1", out
    assert "--rdzv-endpoint=127.0.0.1:" in out.split("ARGV ", 1)[1].splitlines()[0], out
    # srun's own "task 0: Exited" line may come before or after the step's message.
    refused = out.split("REFUSED ", 1)[1]
    assert refused.startswith("srun: ") and "aiperf: --rdzv-iface: no network interface 'nosuch0'" in refused, out


STOP_DRIVER = """
import json, sys, time
from pathlib import Path
from aiperf_runner.backends.slurm.steps import SlurmStepsBackend
from tests.backends.test_conformance import spec_for
run, calls, stop = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
backend = SlurmStepsBackend(run, slots=3, probe=False)
specs = [spec_for(backend, f"t000{i}", "sleep") for i in range(3)]
handles = [backend.launch(spec, slot) for spec, slot in zip(specs, backend.slots())]
deadline = time.monotonic() + 120
while sum((s.trial_dir / "out" / "started").exists() for s in specs) < 2:  # the third waits for a CPU
    assert time.monotonic() < deadline, "two steps never started"
    time.sleep(0.1)
before = calls.read_text().split().count("scancel")
started = time.monotonic()
if stop == "controller":
    for handle in handles:
        handle.cancel()
backend.shutdown()
seconds = time.monotonic() - started
scancels = calls.read_text().split().count("scancel") - before
deadline = time.monotonic() + 15
while backend._steps() and time.monotonic() < deadline:  # a step a moment in COMPLETING
    time.sleep(0.5)
print("STOPPED", json.dumps({"scancels": scancels, "polls": [h.poll() for h in handles], "seconds": seconds,
                             "exited": [h.proc.poll() is not None for h in handles], "left": len(backend._steps())}))
"""


@pytest.mark.parametrize("stop", ["shutdown", "controller"])
def test_shutdown_cancels_every_step_with_one_scancel(one_node: Path, tmp_path: Path, stop: str) -> None:
    """Three steps (two running, one waiting for a CPU): the shutdown, alone or after the controller's
    stop cancelled each attempt (a signal to its srun, no wait), cancels the run's steps with one
    scancel and waits for every srun together; no step is left. ~15 s.

    At most one scancel, not exactly one: the sruns end their steps on the signal, and a shutdown whose squeue
    already finds none has nothing to cancel (a whole CI run saw 0 after the controller's stop, every srun ended
    by its SIGTERM and no step left)."""
    from bench.slurm_load import counting_wrappers

    calls = tmp_path / "calls.log"
    calls.touch()
    counting_wrappers(tmp_path / "bin", calls)
    (tmp_path / "run").mkdir()
    path = f"{tmp_path / 'bin'}:{env_for(one_node)['PATH']}"
    # The whole node: its two CPUs (a plain allocation gets one).
    proc = subprocess.run(["salloc", "--nodes=1", "--exclusive", "--time=5", sys.executable, "-c", STOP_DRIVER,
                           str(tmp_path / "run"), str(calls), stop],
                          env=env_for(one_node, PATH=path), capture_output=True, text=True, timeout=240, cwd=str(REPO))
    out = proc.stdout + proc.stderr
    assert "STOPPED " in out, out[-3000:]
    found = json.loads(out.split("STOPPED ", 1)[1].splitlines()[0])
    assert found["scancels"] <= 1 and found["polls"] == [-15] * 3 and found["exited"] == [True] * 3, out[-3000:]
    assert found["left"] == 0, out[-3000:]
    assert found["seconds"] < 30, out[-3000:]  # not a stop_wait_s (30 s) per step
