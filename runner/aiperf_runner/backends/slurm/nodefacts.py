"""The compute nodes' facts for `aiperf-runner system add`: CPU cores, memory and GPUs per node from
SLURM's node records of a partition (sinfo), and the CPU model from a probe job on one of its nodes.

A site registers its system from a login node; these are the facts of the nodes its runs use.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from .commands import SlurmError, run_slurm
from .placement import Placement, run_probe, usable_nodes

PROBE_JOB_NAME = "aiperf.system-probe"
PROBE_HINT = "; give the CPU model with --cpu-model and skip the probe with --no-probe"


@dataclass(frozen=True)
class NodeFacts:
    """What the partition's nodes have, each field as the distinct values among its nodes (one value
    on a uniform partition); `cpu_model` from the probe job, "" without one."""

    partition: str
    nodes: int
    cpu_cores: tuple[int, ...]
    memory_mb: tuple[int, ...]
    gpus: tuple[int, ...]
    cpu_model: str = ""

    def describe(self) -> str:
        def values(vals: tuple[int, ...], unit: str = "") -> str:
            return " or ".join(f"{v}{unit}" for v in vals) or "?"

        probe = f", CPU {self.cpu_model!r} from a probe job" if self.cpu_model else ""
        return (f"SLURM's node records of partition {self.partition!r} ({self.nodes} node(s): "
                f"{values(self.cpu_cores)} CPUs, {values(self.memory_mb, ' MB')}, {values(self.gpus)} GPU(s) each"
                f"{probe})")


def cluster_answers() -> bool:
    """Whether a SLURM controller answers here (sinfo reads a configuration and lists partitions)."""
    try:
        run_slurm(["sinfo", "-h", "-o", "%P"], timeout=20)
    except SlurmError:
        return False
    return True


def compute_node_facts(partition: str = "", *, probe: bool = True, probe_timeout_s: float = 120.0) -> NodeFacts:
    """The facts of the nodes of `partition` (the cluster's default partition when empty) that are up;
    all of them when none is. With `probe`, a one-task job there reports its CPU model (SlurmError
    with the reason when it fails or waits past `probe_timeout_s`)."""
    placement = Placement(partition=partition or None)
    name, nodes, _ = usable_nodes(placement, 0)
    if not nodes:
        raise SlurmError(f"partition {name!r} has no nodes")
    up = [n for n in nodes if n["usable"]] or nodes
    cpu_model = ""
    if probe:
        found = run_probe(Placement(partition=name).args(), PROBE_JOB_NAME, 0, sys.executable, probe_timeout_s,
                          hint=PROBE_HINT)
        cpu_model = str(found.get("cpu_model") or "")
    return NodeFacts(partition=name, nodes=len(nodes),
                     cpu_cores=tuple(sorted({n["cpus"] for n in up})),
                     memory_mb=tuple(sorted({n["memory_mb"] for n in up})),
                     gpus=tuple(sorted({n["gpus"] for n in up})), cpu_model=cpu_model)
