"""The one interface every backend implements: run a trial command on a slot, poll it, cancel it.

Backends are found through the entry-point group `aiperf_runner.backends`, so a site can add its
own (PBS, LSF, Kubernetes) in a separate package without forking the runner; such a backend
declares the options it takes beyond the shared ones in a `BackendOptions` subclass (options.py).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar

from aiperf_runner.backends.options import BackendOptionError, BackendOptions, positive_int_option

__all__ = ["ENTRY_POINT_GROUP", "Backend", "BackendOptionError", "BackendOptions", "LaunchSpec", "Slot",
           "TrialHandle", "available_backends", "load_backend", "positive_int_option"]
ENTRY_POINT_GROUP = "aiperf_runner.backends"


@dataclass(frozen=True)
class Slot:
    """The unit a trial occupies: one or more nodes and the devices on them."""

    index: int
    nodes: tuple[str, ...] = ("localhost",)
    devices_per_node: int = 1
    device_type: str = "cpu"  # "cpu" or "cuda"
    device_ids: tuple[int, ...] = ()  # local backend: which CUDA devices (CUDA_VISIBLE_DEVICES)

    @property
    def world_size(self) -> int:
        return len(self.nodes) * self.devices_per_node


@dataclass(frozen=True)
class LaunchSpec:
    """What to run for one attempt of one trial.

    `argv` is the trial program (normally `python -m aiperf_runner.train.trial TRIAL_DIR ...`);
    the backend decides how to start it on the slot's nodes with `world_size` processes
    (torchrun / srun) and sends stdout and stderr to the given files.
    """

    trial_id: str
    attempt: int
    argv: tuple[str, ...]
    trial_dir: Path
    stdout: Path
    stderr: Path
    env: dict[str, str] = field(default_factory=dict)


class TrialHandle(abc.ABC):
    """A launched attempt."""

    spec: LaunchSpec
    slot: Slot

    @abc.abstractmethod
    def poll(self) -> int | None:
        """Exit status once finished (0 = success), or None while running."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop the attempt (idempotent); poll() then returns a non-zero status."""

    def describe_failure(self) -> str:
        """A short reason for a non-zero exit (e.g. 'cancelled by scancel', 'node failure')."""
        return ""

    def lost_node(self) -> str | None:
        """After the attempt ended without its result: a node it ran on that has failed since (the
        node's fault, not the trial's), else None. The controller stops using that node and retries
        the trial elsewhere. Backends that cannot tell say None."""
        return None

    @property
    def nodes(self) -> list[str]:
        return list(self.slot.nodes)


class Backend(abc.ABC):
    """Where trials run. A backend is built with its options as keyword arguments, read here, once,
    into its `options_class` (options.py): a subclass with options of its own declares them there.

    The options every backend shares: `slots` (`requested_slots`, None when not given: the
    backend's own default) and `devices_per_slot` (default 1), both at least 1.
    """

    name: str = "abstract"
    options_class: ClassVar[type[BackendOptions]] = BackendOptions
    # Launches that may block (a scheduler's submit command, which can hang for minutes) go out
    # from this many threads, so that the controller's loop never waits on one; 0: `launch`
    # returns at once and is called on the loop. A backend that sets it implements `submit`, safe
    # to call from those threads, and `adopt`, which the loop calls with each handle submitted.
    launch_workers: int = 0

    def __init__(self, run_dir: Path, **options: Any) -> None:
        self.run_dir = Path(run_dir)
        self.options = self.options_class.parse(options, self.name)
        self.requested_slots = self.options.slots
        self.devices_per_slot = self.options.devices_per_slot or 1

    @abc.abstractmethod
    def slots(self) -> list[Slot]:
        """The slots available to this run (concurrency = len(slots()))."""

    @abc.abstractmethod
    def launch(self, spec: LaunchSpec, slot: Slot) -> TrialHandle:
        """Start one attempt on a free slot and return at once."""

    def submit(self, spec: LaunchSpec, slot: Slot) -> TrialHandle:
        """With `launch_workers`: `launch`'s blocking part, called from a launch thread (it may run
        beside the loop's calls of poll, wait_changed and the rest). The handle is not polled or
        cancelled before `adopt` has taken it."""
        return self.launch(spec, slot)

    def adopt(self, handle: TrialHandle) -> None:
        """With `launch_workers`: on the loop's thread, a handle `submit` returned, before its first poll."""
        return None

    def known_hosts(self) -> list[str]:
        """Host names the run's trials may run on (their pseudonyms are made at the start, so that
        a trial process can mask its own error texts; see rundir/privacy.py)."""
        return sorted({n for slot in self.slots() for n in slot.nodes})

    def system_facts(self) -> dict[str, Any]:
        """Facts this backend knows (nodes, CPUs, GRES...), merged into run.json's `system`. They may
        name hosts and paths as they are: the run masks them before publishing (run/startup.py)."""
        return {}

    def prepare(self, trial_argv: tuple[str, ...]) -> None:
        """Called once before the run's clock starts (and on resume), with the trial program's
        command without its per-attempt arguments: whatever makes the first attempts start at once
        (the local backend's warm-start process, zygote.py) is done here, not inside the run."""
        return None

    def wait_changed(self, timeout: float) -> set[TrialHandle] | None:
        """Wait up to `timeout` seconds for news: the attempts that appended to their trial's
        `events.jsonl` or ended since the last call (an empty set when none did in time).

        None, the default after sleeping `timeout`: this backend cannot tell, and the controller
        looks at every running attempt. A backend that knows (its own channel, inotify) saves the
        controller work that grows with the number of running attempts.
        """
        time.sleep(timeout)
        return None

    def reap_orphan(self, trial_dir: Path) -> str | None:
        """On resume: stop whatever a killed controller left running for this trial.

        `trial_dir` is `trials/<id>/` of an attempt the log shows started but never ended. A
        backend records what it needs at launch (the local backend a pid file, SLURM a job id) and
        here kills or cancels it. Returns a short note of what it did, or None.
        """
        return None

    def exclude_node(self, node: str, free: Collection[int]) -> set[int] | None:
        """Place no further attempt on `node` (a trial there refused its staged data: data/staging.py).

        Returns the indices of the slots lost with it: those on the node, or, where the scheduler
        places jobs, as many as the nodes left cannot hold, chosen among `free` (the slots with no
        attempt now) first. An empty set: nothing lost (the node was excluded already). None, the
        default: this backend cannot run without the node (the local backend's one machine), and
        the run stops.
        """
        return None

    def shutdown(self) -> None:
        """Cancel everything still running; leave nothing of the run behind (queue, processes)."""
        return None


def available_backends() -> dict[str, Any]:
    """name -> entry point of every installed backend."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_backend(name: str) -> type[Backend]:
    eps = available_backends()
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none"
        raise ValueError(f"unknown backend {name!r} (installed: {known})")
    cls = eps[name].load()
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise TypeError(f"backend {name!r} ({eps[name].value}) is not a Backend subclass")
    return cls
