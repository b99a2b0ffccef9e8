"""The batch script the slurm backend writes, against golden files (no cluster needed).

Regenerate the golden files after an intended change with `AIPERF_UPDATE_GOLDEN=1 make test
PYTEST_ARGS=tests/slurm/test_batch_script.py` and review the diff.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from aiperf_runner.backends.base import LaunchSpec, Slot
from aiperf_runner.backends.slurm import SlurmBackend

from tests.helpers import REPO

GOLDEN = REPO / "tests" / "golden"
RUN_ID = "0123456789abcdef0123456789abcdef"


def script_for(tmp_path: Path, slot: Slot, **options) -> str:
    run_dir = tmp_path / "run"
    trial_dir = run_dir / "trials" / "t0007"
    trial_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": RUN_ID}))
    spec = LaunchSpec(trial_id="t0007", attempt=2,
                      argv=(sys.executable, "-m", "aiperf_runner.train.trial", str(trial_dir.resolve()),
                            "--attempt", "2", "--nproc", str(slot.devices_per_node)),
                      trial_dir=trial_dir, stdout=trial_dir / "stdout.log", stderr=trial_dir / "stderr.log")
    return SlurmBackend(run_dir, **options).batch_script(spec, slot)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("AIPERF_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"the batch script differs from {path} (see the module docstring)"


def test_one_node_cpu_trial(tmp_path: Path) -> None:
    text = script_for(tmp_path, Slot(index=0, nodes=("n1",), devices_per_node=2))
    check_golden("slurm_batch_one_node.sh", text)
    assert str(tmp_path) not in text and sys.executable not in text  # nothing of this machine in the run


def test_one_node_wrapped_trial_with_a_prologue(tmp_path: Path) -> None:
    (tmp_path / "site.sh").write_text("module load cuda\n")
    text = script_for(tmp_path, Slot(index=0, nodes=("n1",), devices_per_node=2), prologue=str(tmp_path / "site.sh"),
                      wrap="apptainer exec --nv /images/aiperf.sif")
    check_golden("slurm_batch_one_node_wrapped.sh", text)
    assert (tmp_path / "run" / "local" / "slurm-prologue.sh").read_text() == "module load cuda\n"  # the run's copy


def test_two_node_gpu_trial_with_every_option(tmp_path: Path) -> None:
    slot = Slot(index=1, nodes=("gpu1", "gpu2"), devices_per_node=4, device_type="cuda")
    (tmp_path / "site.sh").write_text("export NCCL_IB_HCA=mlx5\n")
    text = script_for(tmp_path, slot, partition="gpu", account="proj42", reservation="hpl-week", qos="bench",
                      constraint="a100&ib", nodes_per_slot=2, gpus_per_node=4, time_limit="02:00:00",
                      prologue=str(tmp_path / "site.sh"), wrap=["apptainer", "exec", "--nv", "/images/aiperf.sif"])
    check_golden("slurm_batch_two_node_gpu.sh", text)
    assert str(tmp_path) not in text and sys.executable not in text


@pytest.mark.parametrize("name", ["slurm_batch_one_node.sh", "slurm_batch_one_node_wrapped.sh",
                                  "slurm_batch_two_node_gpu.sh", "slurm_batch_two_node_rdzv_iface.sh"])
def test_golden_scripts_are_valid_bash(name: str) -> None:
    import subprocess

    assert subprocess.run(["bash", "-n", str(GOLDEN / name)], capture_output=True).returncode == 0


def test_two_node_trial_with_a_rendezvous_interface(tmp_path: Path) -> None:
    """--rdzv-iface: the rendezvous at that interface's address on the batch host, not NodeAddr;
    the script's own line finds lo's address here and fails the attempt on a missing interface."""
    import subprocess

    slot = Slot(index=0, nodes=("gpu1", "gpu2"), devices_per_node=4, device_type="cuda")
    text = script_for(tmp_path, slot, nodes_per_slot=2, gpus_per_node=4, rdzv_iface="ib0")
    check_golden("slurm_batch_two_node_rdzv_iface.sh", text)
    assert "NodeAddr" not in text and "scontrol" not in text
    line = next(w for w in text.splitlines() if w.startswith("head_addr="))
    env = {**os.environ, "AIPERF_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(REPO / "runner"), os.environ.get("PYTHONPATH", "")])}
    ok = subprocess.run(["bash", "-c", line.replace("ib0", "lo") + '; echo "$head_addr"'], capture_output=True,
                        text=True, env=env, timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip() == "127.0.0.1", ok.stderr
    bad = subprocess.run(["bash", "-c", line.replace("ib0", "nosuch0") + "; echo reached"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "reached" not in bad.stdout and "no network interface 'nosuch0'" in bad.stderr


def test_excluded_nodes_go_to_sbatch_with_the_sites_own(tmp_path: Path) -> None:
    from aiperf_runner.backends.slurm.script import exclude_args

    assert exclude_args(["--exclude=x1,x2", "--mem=0"], []) == []
    assert exclude_args(["--mem=0"], ["n2"]) == ["--exclude=n2"]
    assert exclude_args(["--exclude=x1,x2", "-x x3", "--mem=0"], ["n2", "x1"]) == ["--exclude=x1,x2,x3,n2"]


def test_an_excluded_node_costs_the_slots_the_nodes_left_cannot_hold(tmp_path: Path) -> None:
    # No cluster: the partition as sinfo would have listed it.
    backend = SlurmBackend(tmp_path, partition="p", probe=False)
    backend._nodes = [{"name": n, "usable": n != "d"} for n in ("a", "b", "c", "d")]
    assert [s.index for s in backend.slots()] == [0, 1, 2]
    assert backend.exclude_node("b", free={0, 2}) == {2}  # a free slot, the highest
    assert backend.exclude_node("b", free={0, 1}) == set()  # excluded already
    assert backend.exclude_node("d", free={0, 1}) == set()  # never usable: the slots stay
    assert backend.exclude_node("a", free=set()) == {1}  # none free: the highest busy one
    assert backend.exclude_node("c", free={0}) == {0}
    shared = SlurmBackend(tmp_path, partition="p", probe=False, exclusive=False, slots=3)
    shared._nodes = [{"name": n, "usable": True} for n in ("a", "b")]
    assert shared.exclude_node("a", free={0}) == set()  # jobs share the node left
    assert shared.exclude_node("b", free={0}) == {0, 1, 2}


def test_whole_nodes_get_their_whole_memory_unless_the_site_says(tmp_path: Path) -> None:
    """--exclusive gives a job every CPU but only the default memory: --mem=0 goes with it, unless
    the site's extra sbatch arguments give a memory option of their own."""
    from aiperf_runner.backends.slurm.script import memory_args

    assert memory_args(True, []) == ["--mem=0"]
    assert memory_args(False, []) == []
    assert memory_args(True, ["--mem-bind=local", "--tmp=9G"]) == ["--mem=0"]  # not memory sizes
    for site in ("--mem=64G", "--mem 64G", "--mem-per-cpu=4G", "--mem-per-gpu=80G"):
        assert memory_args(True, ["--tmp=9G", site]) == [], site
    assert memory_args(True, ["--mem", "64G"]) == []  # the option and its value as two words
    slot = Slot(index=0, nodes=("n1",), devices_per_node=1)
    text = script_for(tmp_path, slot, extra_sbatch_args=["--mem-per-cpu=4G"])
    assert "#SBATCH --mem-per-cpu=4G" in text and "--mem=0" not in text
    shared = tmp_path / "shared"
    shared.mkdir()
    assert "--mem" not in script_for(shared, slot, exclusive=False)
