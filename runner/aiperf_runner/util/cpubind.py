"""CPU binding of a trial's ranks and their data-loader workers.

Each local rank is pinned (os.sched_setaffinity) to its own share of the CPUs this process may
use, and its DataLoader workers to the same share (`worker_init_fn`), so that ranks do not
migrate across sockets or fight over the same cores:

- CUDA: the cores of the NUMA node nearest the rank's GPU (/sys/bus/pci/devices/<pci id>/numa_node,
  /sys/devices/system/node/node<N>/cpulist), shared out evenly between the local ranks whose GPUs
  sit on that node. Every rank computes the whole plan from the GPUs it sees, so they agree
  without talking to each other.
- CPU, or no NUMA information (numa_node -1, no sysfs, a torch without PCI ids): the allowed
  CPUs split evenly between the local ranks.

Shares are made of whole physical cores (hyper-thread siblings stay together, from
/sys/devices/system/cpu/cpu<N>/topology/thread_siblings_list), and never leave the CPUs this
process was allowed (cgroups, `taskset`, SLURM's allocation); $AIPERF_CPU_SET (a cpulist, set by
the local backend to give each slot its own cores) narrows them further. `--no-cpu-bind` on
`aiperf-runner run` (trial.json `cpu_bind: false`) turns all of this off.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

SYS = Path("/sys")
CPU_SET_ENV = "AIPERF_CPU_SET"


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8-11' -> [0, 1, 2, 3, 8, 9, 10, 11] (the kernel's cpulist format; '' -> []).

    Also takes strides ('0-7:2' -> 0, 2, 4, 6), as the kernel documents for cpuset lists."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        span, _, stride = part.partition(":")
        lo, sep, hi = span.partition("-")
        first, last = int(lo), int(hi) if sep else int(lo)
        step = int(stride) if stride else 1
        if first < 0 or last < first or step < 1:
            raise ValueError(f"bad cpulist range {part!r}")
        cpus.update(range(first, last + 1, step))
    return sorted(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8'."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def node_cpus(node: int, sys_root: Path = SYS) -> list[int]:
    """The CPUs of NUMA node `node` ([] when the kernel does not say)."""
    text = _read(sys_root / "devices" / "system" / "node" / f"node{node}" / "cpulist")
    try:
        return parse_cpulist(text) if text else []
    except ValueError:
        return []


def pci_numa_node(pci_id: str, sys_root: Path = SYS) -> int | None:
    """The NUMA node of a PCI device ('0000:3b:00.0'); None when unknown (-1 on one-node machines)."""
    text = _read(sys_root / "bus" / "pci" / "devices" / pci_id.lower() / "numa_node")
    try:
        node = int(text) if text else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def cuda_pci_id(index: int) -> str | None:
    """The PCI id of visible CUDA device `index` ('0000:3b:00.0'), or None (no CUDA, an old torch)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(index)
        domain, bus, dev = (getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    except Exception:  # noqa: BLE001 - binding is an optimisation: no id, no NUMA placement
        return None
    if not all(isinstance(v, int) for v in (domain, bus, dev)):
        return None
    return f"{domain:04x}:{bus:02x}:{dev:02x}.0"


def core_groups(cpus: Iterable[int], sys_root: Path = SYS) -> list[list[int]]:
    """`cpus` grouped by physical core (hyper-thread siblings together), ordered by first CPU."""
    allowed = set(cpus)
    groups: dict[tuple[int, ...], list[int]] = {}
    for c in sorted(allowed):
        text = _read(sys_root / "devices" / "system" / "cpu" / f"cpu{c}" / "topology" / "thread_siblings_list")
        try:
            siblings = tuple(s for s in parse_cpulist(text) if s in allowed) if text else (c,)
        except ValueError:
            siblings = (c,)
        groups.setdefault(siblings or (c,), []).append(c)
    return sorted(groups.values(), key=lambda g: g[0])


def share(groups: list[list[int]], index: int, count: int) -> list[int]:
    """Share `index` of `count` near-equal shares of whole cores (more shares than cores: cores reused)."""
    if not groups or count < 1:
        return []
    n = len(groups)
    if n < count:
        return sorted(groups[index % n])
    lo, hi = index * n // count, (index + 1) * n // count
    return sorted(c for g in groups[lo:hi] for c in g)


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on, narrowed by $AIPERF_CPU_SET where it leaves any."""
    cpus = sorted(os.sched_getaffinity(0))
    env = os.environ.get(CPU_SET_ENV, "").strip()
    if env:
        try:
            narrowed = [c for c in cpus if c in set(parse_cpulist(env))]
        except ValueError:
            narrowed = []
        cpus = narrowed or cpus
    return cpus


def plan(local_rank: int, local_world_size: int, allowed: list[int], gpu_nodes: list[int | None] | None = None,
         sys_root: Path = SYS) -> tuple[list[int], int | None]:
    """(CPUs for `local_rank`, its NUMA node or None).

    `gpu_nodes`: the NUMA node of each local rank's GPU (None: unknown); None on CPU. A rank
    whose node is unknown, or whose node has none of the allowed CPUs, gets an even share of all
    of them."""
    if gpu_nodes is not None and local_rank < len(gpu_nodes) and gpu_nodes[local_rank] is not None:
        node = gpu_nodes[local_rank]
        assert node is not None
        mine = [c for c in node_cpus(node, sys_root) if c in set(allowed)]
        if mine:
            peers = [r for r, n in enumerate(gpu_nodes[:local_world_size]) if n == node]
            return share(core_groups(mine, sys_root), peers.index(local_rank), len(peers)), node
    return share(core_groups(allowed, sys_root), local_rank, local_world_size), None


def bind_rank(local_rank: int, local_world_size: int, cuda: bool) -> tuple[list[int], int | None]:
    """Pin this process (the calling thread and every thread and process it starts later) to its
    share; returns (CPUs, NUMA node or None). Call it before threads start (process group, data)."""
    if not hasattr(os, "sched_setaffinity"):  # not Linux: nothing to bind with
        return [], None
    gpu_nodes: list[int | None] | None = None
    if cuda:
        gpu_nodes = []
        for i in range(local_world_size):
            pci = cuda_pci_id(i)
            gpu_nodes.append(pci_numa_node(pci) if pci else None)
    cpus, node = plan(local_rank, local_world_size, allowed_cpus(), gpu_nodes)
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:  # e.g. CPUs taken offline meanwhile: run unbound rather than not at all
            return [], None
    return cpus, node


def _bind_worker(cpus: tuple[int, ...], worker_id: int) -> None:
    os.sched_setaffinity(0, cpus)


def worker_init(cpus: Iterable[int]) -> Callable[[int], None] | None:
    """A DataLoader `worker_init_fn` pinning each worker to `cpus` (picklable; None for no CPUs)."""
    cpus = tuple(cpus)
    return partial(_bind_worker, cpus) if cpus else None

