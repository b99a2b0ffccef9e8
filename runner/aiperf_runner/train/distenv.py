"""Where a trial's process sits in its process group, from the environment its launcher set.

`detect_dist_env()` reads torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) or,
under `srun`, SLURM's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the master is the first node of
the step's node list, at its NodeAddr, on a port derived from the job and step ids); `free_port()`
serves a trial that spawns its own processes; `cpu_budget()` is the CPUs a process may use here.
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass

from aiperf_runner.util.hostlist import HostlistError, expand_hostlist

from .config import TrialError


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the trial's process group."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    source: str = "single"  # single / torchrun / slurm / spawn
    # A socket already listening on master_port, inherited by forked ranks: rank 0's store serves on
    # it, so that no rank's first connection is refused (and retried up to a second later).
    listen_fd: int | None = None


def _master_node(nodelist: str) -> str:
    """The first node of a SLURM node list ('gpu[07-09],cpu3' -> 'gpu07'), where the group meets."""
    try:
        nodes = expand_hostlist(nodelist)
    except HostlistError as exc:
        raise TrialError(f"cannot read the SLURM node list: {exc}") from None
    if not nodes:
        raise TrialError(f"the SLURM node list {nodelist!r} names no node")
    return nodes[0]


def _slurm_node_addr(node: str) -> str:
    """The address SLURM reaches `node` at (NodeAddr), which may differ from its name."""
    try:
        out = subprocess.run(["scontrol", "show", "node", node, "-o"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return node
    for word in out.split():
        if word.startswith("NodeAddr=") and len(word) > len("NodeAddr="):
            return word[len("NodeAddr="):]
    return node


def _slurm_port(env: dict[str, str]) -> int:
    """The store's port of an srun step's tasks (no torchrun): 20000-29999, as the SLURM backends' rendezvous,
    below Linux's default ephemeral ports (32768-60999), which the node's own connections may hold."""
    job = int(env.get("SLURM_JOB_ID", "0") or 0)
    step = int(env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", "0")) or 0)
    return 20000 + (job * 31 + step) % 10000


def detect_dist_env(env: dict[str, str] | None = None) -> DistEnv | None:
    """The process group this process was launched into, or None when launched alone."""
    env = dict(os.environ if env is None else env)
    under_slurm = "SLURM_JOB_NODELIST" in env or "SLURM_NODELIST" in env
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""

    def master_addr() -> str:
        if env.get("MASTER_ADDR"):
            return env["MASTER_ADDR"]
        if under_slurm and nodelist:
            return _slurm_node_addr(_master_node(nodelist))
        return "127.0.0.1"

    def master_port() -> int:
        if env.get("MASTER_PORT"):
            return int(env["MASTER_PORT"])
        if under_slurm:
            return _slurm_port(env)
        raise TrialError("WORLD_SIZE is set but MASTER_PORT is not")

    if "WORLD_SIZE" in env:  # torchrun, or any launcher that sets the torch variables
        world = int(env["WORLD_SIZE"])
        rank = int(env.get("RANK", env.get("SLURM_PROCID", "0")))
        local_rank = int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID", rank)))
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
        return DistEnv(rank, world, local_rank, local_world, master_addr(), master_port(), "torchrun")
    ntasks = int(env.get("SLURM_NTASKS", env.get("SLURM_NPROCS", "1")) or 1)
    in_step = "SLURM_STEP_ID" in env or "SLURM_STEPID" in env  # srun, not the batch script itself
    if ntasks > 1 and "SLURM_PROCID" in env and in_step:
        rank = int(env["SLURM_PROCID"])
        local_rank = int(env.get("SLURM_LOCALID", "0"))
        nodes = int(env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES", "1")) or 1)
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE", env.get("SLURM_TASKS_PER_NODE", ""))
        local_world = int(per_node.split("(")[0].split(",")[0]) if per_node[:1].isdigit() else -(-ntasks // nodes)
        return DistEnv(rank, ntasks, local_rank, local_world, master_addr(), master_port(), "slurm")
    return None


def listening_socket() -> socket.socket:
    """A socket listening on a free port of this machine, for the store of ranks forked from here."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def free_port() -> int:
    """A TCP port free on this machine now (for the process group of a self-spawned trial)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_budget() -> int:
    """CPUs this trial may use on this node: its affinity, capped by what SLURM allocated the job
    here (SLURM_CPUS_ON_NODE; without task binding a job on a shared node sees every CPU)."""
    cpus = len(os.sched_getaffinity(0))
    allocated = os.environ.get("SLURM_CPUS_ON_NODE", "")
    return min(cpus, int(allocated)) if allocated.isdigit() and int(allocated) > 0 else cpus
