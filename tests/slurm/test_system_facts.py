"""`aiperf-runner system add` on a SLURM cluster records the compute nodes' facts, not the login node's.

The two-node test cluster declares 1 CPU and 4000 MB per node (this machine has more of both), so
a system registered from here with the cluster's facts shows SLURM's numbers; the probe job, run on a
node of the partition, reports the CPU model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiperf_runner.backends.slurm import nodefacts
from aiperf_runner.util import sysinfo

from tests.service.stack import Stack, require_services

pytestmark = [pytest.mark.services, pytest.mark.slow]

NODE_CPUS, NODE_MB = 1, 4000  # scripts/slurm-cluster.sh, the two-node cluster


@pytest.fixture(scope="module")
def stack(two_node_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_services()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(two_node_cluster))  # the stack's processes take this environment
        s = Stack(tmp_path_factory.mktemp("facts-stack"))
    s.workdir.mkdir(exist_ok=True)
    try:
        s.start()
        yield s
    finally:
        s.stop()


def test_node_records_and_probe_give_the_partitions_facts(two_node: Path) -> None:
    found = nodefacts.compute_node_facts()
    assert (found.partition, found.nodes) == ("debug", 2)
    assert (found.cpu_cores, found.memory_mb, found.gpus) == ((NODE_CPUS,), (NODE_MB,), (0,))
    assert found.cpu_model == sysinfo.cpu_model()  # the probe ran on a node (this machine, here)
    assert "partition 'debug' (2 node(s): 1 CPUs, 4000 MB, 0 GPU(s) each" in found.describe()


def test_system_add_registers_the_compute_nodes_and_says_so(stack: Stack) -> None:
    _, config = stack.new_site("Cluster Facts Lab", "DE")
    out = stack.runner("system", "add", "--name", "cluster", "--accelerator-model", "cpu",
                       "--accelerators-per-node", "0", "--nodes", "2", config=config)
    assert "node facts from SLURM's node records of partition 'debug'" in out.stdout, out.stdout
    assert "from a probe job" in out.stdout
    systems = {s["name"]: s for s in json.loads(stack.runner("system", "list", "--json", config=config).stdout)}
    assert systems["cluster"]["cpu_cores"] == NODE_CPUS
    assert systems["cluster"]["memory_per_node"] == NODE_MB << 20
    assert systems["cluster"]["cpu_model"] == sysinfo.cpu_model()

    here = json.loads(stack.runner("system", "add", "--name", "login node", "--accelerator-model", "cpu",
                                   "--accelerators-per-node", "0", "--nodes", "1", "--facts-from", "here",
                                   "--json", config=config).stdout)
    assert here["facts_from"] == "this machine"
    assert here["cpu_cores"] == sysinfo.cpu_cores() != NODE_CPUS
    assert here["memory_per_node"] == sysinfo.memory_bytes()

    given = stack.runner("system", "add", "--name", "given", "--accelerator-model", "cpu",
                         "--accelerators-per-node", "0", "--nodes", "2", "--cpu-cores", "64", "--no-probe",
                         "--cpu-model", "Given CPU", "--json", config=config)
    record = json.loads(given.stdout)
    assert (record["cpu_cores"], record["cpu_model"], record["memory_per_node"]) == (64, "Given CPU", NODE_MB << 20)
    assert record["facts_from"].startswith("SLURM's node records") and "probe" not in record["facts_from"]


def test_a_partition_slurm_does_not_know_is_an_error(stack: Stack) -> None:
    _, config = stack.new_site("Wrong Partition Lab", "DE")
    out = stack.runner("system", "add", "--name", "x", "--accelerator-model", "cpu", "--accelerators-per-node", "0",
                       "--nodes", "1", "--facts-from", "slurm", "--partition", "nosuch", config=config, check=False)
    assert out.returncode == 1 and "error:" in out.stderr and "nosuch" in out.stderr, out.stderr
    assert json.loads(stack.runner("system", "list", "--json", config=config).stdout) == []
