"""Where a run's jobs may go: partition, account, reservation, QOS, constraint (and extra sbatch
arguments), applied alike to `sinfo` (which nodes count as slots), to the probe job and to every
trial's job.

`Placement.args()` is what every job gets (`#SBATCH` lines, the probe's `srun`). `usable_nodes`
lists the partition's nodes with `usable` set for this placement: up, with the GPUs asked for,
inside the reservation when there is one (where `sinfo` shows its idle nodes as `reserved`), and
with the active features the constraint asks for (`a`, `a&b`, `a|b`; an expression with brackets
or counts is left to the scheduler and filters nothing here).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from aiperf_runner.util.hostlist import HostlistError, expand_hostlist

from .commands import SlurmError, parse_sinfo_nodes, run_slurm

SINFO_FORMAT = "%N|%T|%c|%m|%G|%b"  # name, state, CPUs, memory, GRES, active features
PROBE_HINT = ("; the run did not start (check the partition, reservation, QOS, constraint and extra sbatch arguments, "
              "or skip the probe with --backend-opt probe=false)")
SIMPLE_CONSTRAINT = re.compile(r"[\w.:-]+(?:[&|][\w.:-]+)*")


@dataclass(frozen=True)
class Placement:
    partition: str | None = None
    account: str | None = None
    reservation: str | None = None
    qos: str | None = None
    constraint: str | None = None
    extra: tuple[str, ...] = ()

    def named(self) -> list[str]:
        """The named options as sbatch/srun arguments (`--partition=gpu`, ...), without `extra`."""
        pairs = [("partition", self.partition), ("account", self.account), ("reservation", self.reservation),
                 ("qos", self.qos), ("constraint", self.constraint)]
        return [f"--{key}={value}" for key, value in pairs if value]

    def args(self) -> list[str]:
        return [*self.named(), *self.extra]

    def facts(self) -> dict[str, Any]:
        """What run.json records of the placement: whether a reservation and a QOS were used (their
        names, like the account, stay in local/private.json: rundir/privacy.py), and the constraint."""
        return {"reservation_used": bool(self.reservation), "qos_used": bool(self.qos), "constraint": self.constraint}


def constraint_matches(constraint: str, features: set[str]) -> bool | None:
    """Whether a node with these active features satisfies `constraint` (`a`, `a&b|c`: SLURM reads
    it left to right, AND binding tighter here as in its docs' examples); None when the expression
    has brackets, counts or anything else this does not evaluate."""
    text = constraint.replace(" ", "")
    if not SIMPLE_CONSTRAINT.fullmatch(text):
        return None
    return any(all(f in features for f in group.split("&")) for group in text.split("|"))


def reservation_nodes(name: str) -> dict[str, Any]:
    """{nodes, partition, state} of a reservation (`scontrol show reservation NAME`); SlurmError
    naming it when SLURM does not know it."""
    try:
        text = run_slurm(["scontrol", "show", "reservation", name, "-o"], tries=2)
    except SlurmError as exc:
        raise SlurmError(f"reservation {name!r}: {exc}") from None
    fields = dict(re.findall(r"(\w+)=(\S*)", text))
    if fields.get("ReservationName") != name:
        raise SlurmError(f"reservation {name!r} not found (scontrol show reservation)")
    try:
        nodes = expand_hostlist(fields.get("Nodes", ""))
    except HostlistError as exc:
        raise SlurmError(f"reservation {name!r}: unreadable node list: {exc}") from None
    partition = fields.get("PartitionName", "")
    return {"nodes": nodes, "partition": partition if partition not in ("", "(null)") else None,
            "state": fields.get("State", "")}


def default_partition() -> str:
    names = run_slurm(["sinfo", "-h", "-o", "%P"], tries=3).split()
    defaults = [p.rstrip("*") for p in names if p.endswith("*")]
    if not defaults:
        raise SlurmError("the cluster has no default partition: pass --partition")
    return defaults[0]


def usable_nodes(placement: Placement, gpus_per_node: int) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """(partition, its nodes from sinfo with `usable` set for this placement, notes for run.json)."""
    notes: dict[str, Any] = {}
    reserved: set[str] | None = None
    partition = placement.partition
    if placement.reservation:
        info = reservation_nodes(placement.reservation)
        reserved = set(info["nodes"])
        partition = partition or info["partition"]
        notes["reservation_state"] = info["state"]
        notes["reservation_nodes"] = len(reserved)
    partition = partition or default_partition()
    text = run_slurm(["sinfo", "-h", "-N", "-p", partition, "-o", SINFO_FORMAT], tries=3)
    nodes = parse_sinfo_nodes(text, reserved_usable=reserved is not None)
    if placement.constraint and constraint_matches(placement.constraint, set()) is None:
        notes["constraint_filter"] = "left to the scheduler"
    for node in nodes:
        if node["gpus"] < gpus_per_node or (reserved is not None and node["name"] not in reserved):
            node["usable"] = False
        if placement.constraint and constraint_matches(placement.constraint, node["features"]) is False:
            node["usable"] = False
    return partition, nodes, notes


def run_probe(srun_args: list[str], name: str, gpus_per_node: int, python: str, timeout: float,
              env: dict[str, str] | None = None, hint: str = PROBE_HINT) -> dict[str, Any]:
    """Run a one-task srun (a job, or with `env` of an allocation a step of it) with `srun_args` (the
    placement's options, `--exclusive`...) that prints what sysinfo sees there (CPU model; torch and
    the accelerators when the run uses GPUs). SlurmError with the reason when it fails, prints
    nothing, or waits past `timeout` (then it is cancelled)."""
    # torch (slow to import) only where it finds something the controller's machine may lack: GPUs.
    facts = "s.torch_facts()" if gpus_per_node > 0 else "{}"
    code = (f"import json; from aiperf_runner.util import sysinfo as s; f = {facts}; "
            "f['cpu_model'] = s.cpu_model(); print('AIPERF_PROBE ' + json.dumps(f))")
    argv = ["srun", "--nodes=1", "--ntasks=1", f"--job-name={name}", "--quiet", *srun_args]
    if gpus_per_node > 0:
        argv.append(f"--gres=gpu:{gpus_per_node}")
    argv += ["--time=5", python, "-c", code]
    try:
        out = run_slurm(argv, timeout=timeout, env=env)
    except SlurmError as exc:
        with contextlib.suppress(SlurmError):  # a probe still waiting in the queue
            run_slurm(["scancel", "-u", str(os.getuid()), f"--name={name}"])
        raise SlurmError(f"the probe job failed: {str(exc)[:300]}{hint}") from None
    for line in out.splitlines():
        if line.startswith("AIPERF_PROBE "):
            try:
                found = json.loads(line.split(" ", 1)[1])
            except ValueError:
                break
            if isinstance(found, dict):
                return found
    raise SlurmError(f"the probe job gave no answer: {out.strip()[-300:]!r}{hint}")


def apply_probe(facts: dict[str, Any], probe: dict[str, Any], gpus_per_node: int, nodes: int) -> None:
    """Put what the probe found into the system facts: CPU model, torch and CUDA versions, and the
    accelerators of `nodes` nodes (the probed node's first `gpus_per_node`, for each node)."""
    if not probe:
        return
    facts["cpu_model"] = probe.get("cpu_model") or None
    for key in ("torch", "cuda", "cuda_build"):
        if key in probe:
            facts[key] = probe[key]
    facts["slurm"]["probe"] = "ok"
    per_node = (probe.get("accelerators") or [])[:gpus_per_node] if gpus_per_node > 0 else []
    if per_node:
        accelerators = [per_node[i % len(per_node)] for i in range(nodes * gpus_per_node)]
        facts.update(accelerators=accelerators, accelerator_model=accelerators[0]["model"],
                     accelerator_count=len(accelerators))
