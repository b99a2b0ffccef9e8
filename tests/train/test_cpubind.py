"""CPU binding (util/cpubind.py): cpulists, the split of cores between local ranks, NUMA placement
read from a sysfs tree laid out as the kernel's, data-loader workers, and a 2-rank DDP trial bound.

The NUMA cases use a fake /sys (tmp_path) because this machine has one node and no GPU; the
split of the real allowed CPUs and the DDP trial run on this machine as they are.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import pytest
import torch
from aiperf_runner.spec.eventlog import read_events
from aiperf_runner.util import cpubind
from aiperf_runner.util.cpubind import (
    allowed_cpus,
    core_groups,
    format_cpulist,
    node_cpus,
    parse_cpulist,
    pci_numa_node,
    plan,
    share,
    worker_init,
)
from torch.utils.data import DataLoader, Dataset

from tests.train.conftest import run_trial_program, write_trial_dir


def test_parse_and_format_cpulists() -> None:
    assert parse_cpulist("0-3,8-11") == [0, 1, 2, 3, 8, 9, 10, 11]
    assert parse_cpulist("5") == [5] and parse_cpulist("") == [] and parse_cpulist(" 1,3\n") == [1, 3]
    assert parse_cpulist("0-7:2") == [0, 2, 4, 6]
    assert parse_cpulist("3,0-1,1") == [0, 1, 3]
    for bad in ("3-1", "a", "-1", "0-4:0"):
        with pytest.raises(ValueError):
            parse_cpulist(bad)
    assert format_cpulist([0, 1, 2, 3, 8, 9, 10, 11]) == "0-3,8-11"
    assert format_cpulist([5, 1, 3, 2]) == "1-3,5" and format_cpulist([]) == ""


def fake_sys(root: Path, nodes: dict[int, str], siblings: dict[int, str] | None = None,
             pci: dict[str, str] | None = None) -> Path:
    """A /sys with NUMA nodes (cpulists), CPU thread siblings and PCI devices' numa_node."""
    for n, cpus in nodes.items():
        d = root / "devices" / "system" / "node" / f"node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    for cpu, sib in (siblings or {}).items():
        d = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(sib + "\n")
    for dev, node in (pci or {}).items():
        d = root / "bus" / "pci" / "devices" / dev
        d.mkdir(parents=True)
        (d / "numa_node").write_text(node + "\n")
    return root


def test_split_for_one_and_two_local_ranks_on_this_machine() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    groups = core_groups(allowed)
    assert sorted(c for g in groups for c in g) == allowed
    assert share(groups, 0, 1) == allowed  # one rank: every allowed CPU, as without binding
    two = [share(groups, r, 2) for r in range(2)]
    if len(groups) >= 2:
        assert not set(two[0]) & set(two[1]) and sorted(two[0] + two[1]) == allowed
        assert abs(len(two[0]) - len(two[1])) <= max(len(g) for g in groups)
    else:  # one core: both ranks share it
        assert two[0] == two[1] == allowed
    assert plan(1, 2, allowed) == (two[1], None)  # CPU: no GPU, no NUMA node


def test_split_keeps_hyperthread_siblings_together(tmp_path: Path) -> None:
    # 4 cores, 8 CPUs, siblings numbered 4 apart (as Linux numbers them on most x86 machines).
    sys_root = fake_sys(tmp_path, {0: "0-7"}, {c: f"{c % 4},{c % 4 + 4}" for c in range(8)})
    groups = core_groups(range(8), sys_root)
    assert groups == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert [share(groups, r, 2) for r in range(2)] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert [share(groups, r, 3) for r in range(3)] == [[0, 4], [1, 5], [2, 3, 6, 7]]
    assert [share(groups, r, 6) for r in range(6)][4:] == [[0, 4], [1, 5]]  # more ranks than cores: reuse
    assert core_groups([0, 1, 2], sys_root) == [[0], [1], [2]]  # a sibling outside the allowed set


def test_numa_placement_from_the_gpus_nodes(tmp_path: Path) -> None:
    sys_root = fake_sys(tmp_path, {0: "0-3", 1: "4-7"},
                        pci={"0000:3b:00.0": "0", "0000:86:00.0": "1", "0000:01:00.0": "-1"})
    assert pci_numa_node("0000:3B:00.0", sys_root) == 0 and pci_numa_node("0000:86:00.0", sys_root) == 1
    assert pci_numa_node("0000:01:00.0", sys_root) is None  # -1: the kernel does not know
    assert pci_numa_node("0000:99:00.0", sys_root) is None  # no such device
    assert node_cpus(1, sys_root) == [4, 5, 6, 7] and node_cpus(7, sys_root) == []
    allowed = list(range(8))
    # 4 GPUs, two per node: the ranks on a node split its cores.
    nodes: list[int | None] = [0, 0, 1, 1]
    assert [plan(r, 4, allowed, nodes, sys_root) for r in range(4)] == \
        [([0, 1], 0), ([2, 3], 0), ([4, 5], 1), ([6, 7], 1)]
    # One GPU per node: the whole node.
    assert plan(1, 2, allowed, [0, 1], sys_root) == ([4, 5, 6, 7], 1)
    # Only part of node 1 allowed (cgroup): that part.
    assert plan(0, 1, [0, 1, 6, 7], [1], sys_root) == ([6, 7], 1)
    # Unknown node, or a node with none of the allowed CPUs: an even share of what is allowed.
    assert plan(1, 2, allowed, [None, None], sys_root) == ([4, 5, 6, 7], None)
    assert plan(0, 2, [0, 1, 2, 3], [1, 1], sys_root) == ([0, 1], None)


def test_cpu_set_of_the_slot_narrows_the_allowed_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    monkeypatch.setenv(cpubind.CPU_SET_ENV, str(allowed[-1]))
    assert allowed_cpus() == [allowed[-1]]
    monkeypatch.setenv(cpubind.CPU_SET_ENV, "100000")  # none of ours: ignored rather than unusable
    assert allowed_cpus() == allowed


class _Affinity(Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(sorted(os.sched_getaffinity(0)))


def test_data_loader_workers_are_pinned() -> None:
    one = [min(os.sched_getaffinity(0))]
    init = worker_init(one)
    pickle.loads(pickle.dumps(init))  # a "spawn" DataLoader pickles it
    loader = DataLoader(_Affinity(), batch_size=None, num_workers=1, worker_init_fn=init)
    assert all(batch.tolist() == one for batch in loader)
    assert worker_init([]) is None


@pytest.mark.slow
def test_two_rank_trial_runs_bound(tmp_path: Path) -> None:
    """~15 s: a 2-process DDP trial with binding on (the default); each rank on its own share."""
    d = write_trial_dir(tmp_path / "t0021", epoch_budget=1,
                        lr_scaling={"rule": "linear", "reference_batch": 0, "warmup_epochs": None}, cpu_bind=True)
    proc = run_trial_program(d, "--attempt", "1", "--nproc", "2")
    assert proc.returncode == 0, proc.stderr
    bound = dict(re.findall(r"^rank (\d): CPUs (\S+) \(an even share\)$", proc.stdout, re.M))
    assert set(bound) == {"0", "1"}, proc.stdout
    groups = core_groups(sorted(os.sched_getaffinity(0)))
    assert [parse_cpulist(bound[r]) for r in "01"] == [share(groups, r, 2) for r in range(2)]
    end = read_events(d / "events.jsonl")[0]
    assert end["accelerators"] == {"cpu": 2}
    assert end["lr_scaling"] == {"rule": "linear", "base_lr": 0.05, "reference_batch": 32, "global_batch": 64,
                                 "peak_lr": 0.1, "warmup_epochs": 0.1}


def test_binding_off_leaves_the_process_alone(tmp_path: Path) -> None:
    from aiperf_runner.train.config import TrialConfig
    from aiperf_runner.train.trial import DistEnv, _bind_cpus

    cfg = TrialConfig.load(write_trial_dir(tmp_path / "t0022", cpu_bind=False))
    assert cfg.cpu_bind is False
    assert _bind_cpus(cfg, DistEnv(0, 2, 0, 2), torch.device("cpu")) is None
    cfg.cpu_bind = True  # on, but srun started each rank: srun's own --cpu-bind decides
    assert _bind_cpus(cfg, DistEnv(0, 2, 0, 2, source="slurm"), torch.device("cpu")) is None
