"""The options every backend shares (`slots`, `devices_per_slot`), read once in Backend."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aiperf_runner.backends.base import positive_int_option
from aiperf_runner.backends.inprocess import InProcessBackend
from aiperf_runner.backends.local import LocalBackend
from aiperf_runner.backends.slurm import SlurmBackend


def test_positive_int_option() -> None:
    assert positive_int_option({}, "slots") is None
    assert positive_int_option({"slots": None}, "slots") is None
    assert positive_int_option({"slots": 3}, "slots") == 3
    assert positive_int_option({"slots": "4"}, "slots") == 4  # --backend-opt slots=4 arrives as text or a number
    assert positive_int_option({"slots": 2.0}, "slots") == 2
    for bad in (0, -1, "0"):
        with pytest.raises(ValueError, match="slots must be at least 1"):
            positive_int_option({"slots": bad}, "slots")
    for bad in ("two", 1.5, True, [1]):
        with pytest.raises(ValueError, match="slots must be a whole number"):
            positive_int_option({"slots": bad}, "slots")


@pytest.mark.parametrize("cls", [LocalBackend, InProcessBackend, SlurmBackend])
def test_every_backend_reads_them_alike(cls: type, tmp_path: Path) -> None:
    backend = cls(tmp_path, slots="3", devices_per_slot=2, device_type="cpu")
    assert (backend.requested_slots, backend.devices_per_slot) == (3, 2)
    backend = cls(tmp_path, device_type="cpu")
    # local on CPU: one slot uses the machine's cores, a process each (LocalBackend's own default)
    default = max(1, len(os.sched_getaffinity(0))) if cls is LocalBackend else 1
    assert (backend.requested_slots, backend.devices_per_slot) == (None, default)
    with pytest.raises(ValueError, match="devices_per_slot must be at least 1"):
        cls(tmp_path, devices_per_slot=0, device_type="cpu")


def test_local_cpu_slots_share_the_cores_as_processes(tmp_path: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    for slots in (1, 2, 3):
        backend = LocalBackend(tmp_path, slots=slots, device_type="cpu")
        assert backend.devices_per_slot == max(1, cores // slots)
        assert backend.threads == max(1, cores // (slots * backend.devices_per_slot))
    assert LocalBackend(tmp_path, slots=1, devices_per_slot=1, device_type="cpu").devices_per_slot == 1


def test_what_the_backends_make_of_them(tmp_path: Path) -> None:
    local = LocalBackend(tmp_path, slots=2, devices_per_slot=3, device_type="cpu")
    assert [(s.index, s.devices_per_node) for s in local.slots()] == [(0, 3), (1, 3)]
    inprocess = InProcessBackend(tmp_path, devices_per_slot=2)
    assert [(s.index, s.devices_per_node) for s in inprocess.slots()] == [(0, 2)]
    slurm = SlurmBackend(tmp_path, slots=4, devices_per_slot=4, nodes_per_slot=2)  # no SLURM command yet
    assert (slurm.max_slots, slurm.devices_per_node) == (4, 2)
    assert SlurmBackend(tmp_path, gpus_per_node=8, devices_per_slot=2).devices_per_node == 8
