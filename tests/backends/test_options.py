"""Backend options: declared per backend (backends/options.py), read once from the bag a backend is
built with; the shared ones (`slots`, `devices_per_slot`) alike everywhere, text from the command
line converted to each field's type, and an option no backend declares refused by name."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.backends.base import (
    Backend,
    BackendOptionError,
    BackendOptions,
    LaunchSpec,
    Slot,
    TrialHandle,
    available_backends,
    load_backend,
    positive_int_option,
)
from aiperf_runner.backends.inprocess import InProcessBackend
from aiperf_runner.backends.local import LocalBackend
from aiperf_runner.backends.options import option
from aiperf_runner.backends.sim import SimBackend
from aiperf_runner.backends.slurm import SlurmBackend
from aiperf_runner.backends.slurm.steps import SlurmStepsBackend
from aiperf_runner.rundir.config import RunConfig
from aiperf_runner.spec.errors import AiperfError

REGISTERED = sorted(available_backends())


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


CPU_ONLY = {LocalBackend: {"device_type": "cpu"}}


def _close(backend: Backend) -> None:
    """Stop the sim backend's scheduler thread (the slurm backend's shutdown would ask squeue)."""
    if isinstance(backend, SimBackend):
        backend.shutdown()


@pytest.mark.parametrize("cls", [LocalBackend, InProcessBackend, SimBackend, SlurmBackend])
def test_every_backend_reads_them_alike(cls: type[Backend], tmp_path: Path) -> None:
    extra = CPU_ONLY.get(cls, {})
    backend = cls(tmp_path, slots="3", devices_per_slot=2, **extra)
    assert (backend.requested_slots, backend.devices_per_slot) == (3, 2)
    _close(backend)
    backend = cls(tmp_path, **extra)
    # local on CPU: one slot uses the machine's cores, a process each (LocalBackend's own default)
    default = max(1, len(os.sched_getaffinity(0))) if cls is LocalBackend else 1
    assert (backend.requested_slots, backend.devices_per_slot) == (None, default)
    _close(backend)
    with pytest.raises(ValueError, match="devices_per_slot must be at least 1"):
        cls(tmp_path, devices_per_slot=0, **extra)
    with pytest.raises(ValueError, match="slots must be a whole number"):
        cls(tmp_path, slots="two", **extra)


@pytest.mark.parametrize("name", REGISTERED)
def test_a_misspelt_option_is_refused_naming_the_known_ones(name: str, tmp_path: Path) -> None:
    cls = load_backend(name)
    with pytest.raises(BackendOptionError) as caught:
        cls(tmp_path, slots=1, exlusive=False)
    message = str(caught.value)
    assert "'exlusive'" in message and name in message
    for known in cls.options_class.known():
        assert known in message
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, AiperfError)


@pytest.mark.parametrize("name", REGISTERED)
def test_every_registered_backend_declares_the_shared_options(name: str) -> None:
    known = load_backend(name).options_class.known()
    assert {"slots", "devices_per_slot"} <= set(known)


def test_a_close_name_is_suggested(tmp_path: Path) -> None:
    with pytest.raises(BackendOptionError, match=r"'partiton' \(did you mean 'partition'\?\)"):
        SlurmBackend(tmp_path, partiton="gpu")
    with pytest.raises(BackendOptionError, match="the local backend has no option 'partition'"):
        LocalBackend(tmp_path, partition="gpu", device_type="cpu")  # --partition is the slurm backends'


def test_command_line_text_becomes_the_declared_types(tmp_path: Path) -> None:
    slurm = SlurmBackend(tmp_path, exclusive="false", probe="0", start_wait_s="2.5", nodes_per_slot="2",
                         gpus_per_node="4", time_limit=90, wrap="apptainer exec --nv img.sif",
                         extra_sbatch_args="--mem=1G", partition="")
    assert slurm.exclusive is False and slurm.probe is False and slurm.start_wait_s == 2.5
    assert (slurm.nodes_per_slot, slurm.gpus_per_node, slurm.time_limit) == (2, 4, "90")
    assert slurm.launcher.wrap == ("apptainer", "exec", "--nv", "img.sif")
    assert slurm.extra_sbatch_args == ("--mem=1G",) and slurm.partition is None
    listed = SlurmBackend(tmp_path, wrap=["a b", "c"], extra_sbatch_args=["--mem=1G", "--tmp=9G"])
    assert listed.launcher.wrap == ("a b", "c") and listed.extra_sbatch_args == ("--mem=1G", "--tmp=9G")
    local = LocalBackend(tmp_path, device_type="cpu", warm_start="0", threads_per_process="2")
    assert local.warm_start is False and local.threads == 2
    sim = SimBackend(tmp_path, flops_per_s="1e12", seed="7")
    assert (sim.model.flops_per_s, sim.model.seed) == (1e12, 7)
    sim.shutdown()


@pytest.mark.parametrize(("cls", "options", "message"), [
    (SlurmBackend, {"exclusive": "maybe"}, "exclusive must be true or false, not 'maybe'"),
    (SlurmBackend, {"gpus_per_node": -1}, "gpus_per_node must be at least 0, not -1"),
    (SlurmBackend, {"nodes_per_slot": 0}, "nodes_per_slot must be at least 1, not 0"),
    (SlurmBackend, {"start_wait_s": "soon"}, "start_wait_s must be a number, not 'soon'"),
    (LocalBackend, {"device_type": "tpu"}, "device_type must be one of cpu, cuda, not 'tpu'"),
    (LocalBackend, {"threads_per_process": 1.5}, "threads_per_process must be a whole number"),
    (SimBackend, {"noise": "loud"}, "noise must be a number, not 'loud'"),
    (SimBackend, {"failure_rate": 2}, "failure_rate"),
    (InProcessBackend, {"target": "module:func"}, "target must be a callable"),
])
def test_a_bad_value_is_refused_naming_the_option(cls: type[Backend], options: dict[str, Any], message: str,
                                                  tmp_path: Path) -> None:
    with pytest.raises(BackendOptionError, match=message):
        cls(tmp_path, **options)


def test_slurm_steps_says_which_options_belong_to_the_allocation(tmp_path: Path) -> None:
    with pytest.raises(BackendOptionError, match="--reservation, --time-limit: with slurm-steps"):
        SlurmStepsBackend(tmp_path, reservation="r", time_limit="1:00:00")


def test_options_read_back_from_run_json_give_the_same_backend_options(tmp_path: Path) -> None:
    """--resume builds the backend from run.json's config: the same options after a JSON round trip."""
    options = {"exclusive": False, "wrap": "apptainer exec img.sif", "extra_sbatch_args": ["--mem=1G"],
               "start_wait_s": 0, "nodes_per_slot": 2}
    config = RunConfig(backend="slurm", slots=2, backend_options=options)
    again = RunConfig.from_json(json.loads(json.dumps(asdict(config))))
    first = SlurmBackend(tmp_path, slots=config.slots, **config.backend_options).options
    second = SlurmBackend(tmp_path, slots=again.slots, **again.backend_options).options
    assert first == second and first.wrap == ("apptainer", "exec", "img.sif")


# ---- a third-party backend ---------------------------------------------------------------------------


class _Handle(TrialHandle):
    def poll(self) -> int | None:
        return 0

    def cancel(self) -> None:
        return None


@dataclass(frozen=True)
class QueueOptions(BackendOptions):
    queue: str = "batch"
    priority: int = option(0, minimum=0)


class PluginBackend(Backend):
    """A site's backend, as a separate package would write it: shared options only."""

    name = "plugin"

    def slots(self) -> list[Slot]:
        return [Slot(index=i) for i in range(self.requested_slots or 1)]

    def launch(self, spec: LaunchSpec, slot: Slot) -> TrialHandle:
        return _Handle()


class QueueBackend(PluginBackend):
    """A site's backend with options of its own."""

    name = "queue"
    options_class = QueueOptions
    options: QueueOptions


def test_a_third_party_backend_declares_its_own_options(tmp_path: Path) -> None:
    plain = PluginBackend(tmp_path, slots=2, devices_per_slot="2")
    assert len(plain.slots()) == 2 and plain.devices_per_slot == 2
    with pytest.raises(BackendOptionError, match="the plugin backend has no option 'queue'"):
        PluginBackend(tmp_path, queue="gpu")
    queued = QueueBackend(tmp_path, slots=3, queue="gpu", priority="5")
    assert (queued.options.queue, queued.options.priority, len(queued.slots())) == ("gpu", 5, 3)
    assert QueueBackend(tmp_path).options.queue == "batch"
    with pytest.raises(BackendOptionError, match="priority must be at least 0"):
        QueueBackend(tmp_path, priority=-1)


def test_what_the_backends_make_of_them(tmp_path: Path) -> None:
    local = LocalBackend(tmp_path, slots=2, devices_per_slot=3, device_type="cpu")
    assert [(s.index, s.devices_per_node) for s in local.slots()] == [(0, 3), (1, 3)]
    inprocess = InProcessBackend(tmp_path, devices_per_slot=2)
    assert [(s.index, s.devices_per_node) for s in inprocess.slots()] == [(0, 2)]
    slurm = SlurmBackend(tmp_path, slots=4, devices_per_slot=4, nodes_per_slot=2)  # no SLURM command yet
    assert (slurm.max_slots, slurm.devices_per_node) == (4, 2)
    assert SlurmBackend(tmp_path, gpus_per_node=8, devices_per_slot=2).devices_per_node == 8


def test_local_cpu_slots_share_the_cores_as_processes(tmp_path: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    for slots in (1, 2, 3):
        backend = LocalBackend(tmp_path, slots=slots, device_type="cpu")
        assert backend.devices_per_slot == max(1, cores // slots)
        assert backend.threads == max(1, cores // (slots * backend.devices_per_slot))
    assert LocalBackend(tmp_path, slots=1, devices_per_slot=1, device_type="cpu").devices_per_slot == 1
