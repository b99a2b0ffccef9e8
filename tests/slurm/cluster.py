"""The local SLURM clusters of scripts/slurm-cluster.sh, as the tests use them.

The one-node cluster is started by scripts/services.sh (which .ci/run calls); the two-node
cluster is started by the tests that need it and stopped after them (it uses other ports and
another state directory, so the one-node cluster keeps running meanwhile).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import REPO, need_service
from tests.helpers import run_events as read_events  # noqa: F401  (the SLURM tests import it from here)

SCRIPT = REPO / "scripts" / "slurm-cluster.sh"
ONE_NODE_CONF = REPO / "var" / "slurm" / "slurm.conf"
TWO_NODE_CONF = REPO / "var" / "slurm" / "two-node" / "slurm.conf"
JOBCOMP_LOG = REPO / "var" / "slurm" / "log" / "jobcomp.log"
RUNNER = [sys.executable, "-m", "aiperf_runner"]


def env_for(conf: Path, **extra: str) -> dict[str, str]:
    """The environment of a client command (or of the runner) talking to the cluster of `conf`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(SLURM_CONF=str(conf), PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    env.update(extra)
    return env


def slurm(conf: Path, *argv: str, check: bool = True, timeout: float = 60) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=env_for(conf), timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


UNENDED = {"", "PENDING", "RUNNING", "REQUEUED", "COMPLETING", "SUSPENDED"}


def sacct(conf: Path, job_id: str, timeout: float = 30, name: str | None = None) -> dict[str, tuple[str, str]]:
    """{job or step id: (name, state)} as `sacct` lists them, once it lists the job as ended (the
    controller hands records to slurmdbd a moment after the fact, the job's end after its steps' and
    after squeue has let it go); what it lists at `timeout` otherwise.
    `name`: only the job of that name (a test cluster restarted from scratch hands out job ids
    again, and sacct lists every job that had the id). Needs accounting: `require_accounting` first."""
    deadline = time.monotonic() + timeout
    by_name = ["--name", name] if name else []
    while True:
        out = slurm(conf, "sacct", "-n", "-P", "-j", job_id, *by_name, "--format=JobID,JobName,State", check=False)
        # A state may say by whom ("CANCELLED by 0"): its first word.
        rows = {i: (n, (s.split() or [""])[0])
                for i, n, s in (line.split("|") for line in out.splitlines() if line.count("|") == 2)}
        if rows.get(job_id, ("", ""))[1] not in UNENDED or time.monotonic() >= deadline:
            return rows
        time.sleep(0.5)


def require_accounting(conf: Path) -> None:
    """The cluster keeps accounting (scripts/slurm-cluster.sh runs slurmdbd when it is installed)."""
    config = slurm(conf, "scontrol", "show", "config", check=False)
    need_service("accounting_storage/slurmdbd" in config,
                 "the SLURM test cluster keeps no accounting: apt-get install slurmdbd mariadb-server, then "
                 "scripts/slurm-cluster.sh start")


def node_states(conf: Path) -> dict[str, str]:
    try:
        out = slurm(conf, "sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)


def cluster_ready(conf: Path, nodes: int = 1, timeout: float = 0) -> bool:
    """`sinfo` answers and `nodes` nodes are idle (waiting up to `timeout` seconds for that)."""
    deadline = time.monotonic() + timeout
    while True:
        if conf.exists() and sum(s == "idle" for s in node_states(conf).values()) >= nodes:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def require_one_node() -> Path:
    """The running one-node cluster (skip locally, fail under CI when it is not there)."""
    need_service(cluster_ready(ONE_NODE_CONF, timeout=30),
                 f"no idle one-node SLURM cluster ({ONE_NODE_CONF}): run `scripts/slurm-cluster.sh start` as root")
    return ONE_NODE_CONF


def start_two_node() -> Path:
    ok = os.geteuid() == 0 and subprocess.run(["bash", str(SCRIPT), "start-two-node"], capture_output=True,
                                              timeout=120).returncode == 0
    need_service(ok and cluster_ready(TWO_NODE_CONF, nodes=2, timeout=30),
                 "could not start the two-node SLURM cluster (needs root, slurm-wlm and munge)")
    return TWO_NODE_CONF


def stop_two_node() -> None:
    subprocess.run(["bash", str(SCRIPT), "stop-two-node"], capture_output=True, timeout=120)


def queue(conf: Path) -> dict[str, tuple[str, str]]:
    """Jobs squeue lists: {job id: (name, state)}."""
    out = slurm(conf, "squeue", "-h", "-o", "%i|%j|%T")
    return {i: (n, s) for i, n, s in (line.split("|") for line in out.splitlines() if line.count("|") == 2)}


def start_run(conf: Path, run_dir: Path, *args: str, cwd: Path = REPO, **env: str) -> subprocess.Popen[str]:
    """`aiperf-runner run --backend slurm --out RUN_DIR ARGS...` against the cluster of `conf`, from `cwd`
    (RUN_DIR is given relative to `cwd` when it lies inside it, as an operator would type it)."""
    out = os.path.relpath(run_dir, cwd) if Path(cwd) in Path(run_dir).parents else str(run_dir)
    return subprocess.Popen([*RUNNER, "run", "--backend", "slurm", "--out", out, "--progress", "plain", *args],
                            env=env_for(conf, **env), cwd=str(cwd), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen[str], timeout: float) -> str:
    """Wait for a run to end; its output. Kill it (and fail) when it overruns."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"the run did not end within {timeout} s:\n{out[-3000:]}") from None
    assert proc.returncode == 0, f"the run failed ({proc.returncode}):\n{out[-3000:]}"
    return out


def run_to_end(conf: Path, run_dir: Path, *args: str, timeout: float = 120, **env: str) -> str:
    """`start_run` and `finish`: a run that must end by itself, successfully, within `timeout`."""
    return finish(start_run(conf, run_dir, *args, **env), timeout)


def wait_until(predicate, timeout: float, what: str, proc: subprocess.Popen[str] | None = None, every: float = 0.25):
    """Poll `predicate` until it returns something truthy (returned); fail after `timeout` or if `proc` ends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended before {what}:\n{proc.stdout.read()[-3000:] if proc.stdout else ''}")
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def verify_ok(run_dir: Path) -> dict:
    proc = subprocess.run([*RUNNER, "verify", str(run_dir), "--json"], capture_output=True, text=True,
                          env=env_for(ONE_NODE_CONF), cwd=str(REPO), timeout=300)
    assert proc.returncode == 0, f"verify failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    report = json.loads(proc.stdout)
    assert report["integrity_ok"]
    return report


def run_tag(run_dir: Path) -> str:
    return "aiperf." + json.loads((run_dir / "run.json").read_text())["run_id"][:8] + "."
