"""The options of the two SLURM backends, declared and typed (backends/options.py): those both
take (nodes, GPUs, the probe, the launcher), the one-job-per-trial backend's placement and job
settings, and the `slurm-steps` backend's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiperf_runner.backends.options import BackendOptionError, BackendOptions, option, shell_words, words

# One squeue call, for every job of the run, answers all polls for this long (option `squeue_interval_s`).
# A trial's end is seen sooner through its exit file; squeue only says why a job ended without one.
SQUEUE_INTERVAL_S = 5.0
EXIT_FILE_GRACE_S = 30.0  # a shared filesystem may show the exit file a little after the job ends
# Options of the one-job-per-trial backend that belong to the allocation with slurm-steps (sbatch/salloc's).
ALLOCATION_OPTIONS = ("partition", "account", "reservation", "qos", "constraint", "time_limit", "extra_sbatch_args")


@dataclass(frozen=True)
class SlurmCommonOptions(BackendOptions):
    """What both SLURM backends take: slot shape, the probe and the launcher (launcher.py)."""

    nodes_per_slot: int = option(1, minimum=1)
    gpus_per_node: int = option(0, minimum=0)  # 0: CPU
    probe: bool = True
    probe_timeout_s: float = 300.0
    prologue: str | None = None  # a file, copied into the run directory
    wrap: tuple[str, ...] = option((), parse=shell_words)
    trial_python: str | None = None
    rdzv_iface: str | None = None


@dataclass(frozen=True)
class SlurmOptions(SlurmCommonOptions):
    """The `slurm` backend's options (its package's docstring)."""

    partition: str | None = None
    account: str | None = None
    reservation: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time_limit: str | None = None  # sbatch --time
    exclusive: bool = True
    extra_sbatch_args: tuple[str, ...] = option((), parse=words)
    # Seconds launch() waits for the job to start (so that trial_started names its real nodes).
    # 0: none; the controller's loop goes on at once (a wave of hundreds of launches).
    start_wait_s: float = 0.0
    # sbatch calls in flight at once, from threads beside the controller's loop (a first wave of
    # hundreds of jobs; an sbatch that hangs holds one thread, not the loop and its heartbeats).
    launch_workers: int = option(8, minimum=1)
    squeue_interval_s: float = SQUEUE_INTERVAL_S
    exit_file_grace_s: float = EXIT_FILE_GRACE_S
    shutdown_wait_s: float = 30.0  # one deadline for every job of the run to leave the queue at shutdown


@dataclass(frozen=True)
class SlurmStepsOptions(SlurmCommonOptions):
    """The `slurm-steps` backend's options (steps.py's docstring)."""

    stop_wait_s: float = 30.0  # one deadline for every step's srun to exit at shutdown (then SIGKILL)
    # One zygote step per node forks the attempts of one-node slots (warm.py): no step, interpreter or torch
    # import per attempt. Off by default: not yet measured on GPU nodes.
    warm_start: bool = False

    @classmethod
    def check_names(cls, options: Mapping[str, Any], backend: str = "") -> None:
        """The placement options of the `slurm` backend are the allocation's here: say so, rather
        than only that they are unknown (one given as None or empty is as if not given)."""
        given = [k for k in ALLOCATION_OPTIONS if options.get(k)]
        if given:
            raise BackendOptionError(f"{', '.join('--' + k.replace('_', '-') for k in given)}: with slurm-steps "
                                     "these are options of the allocation: give them to sbatch or salloc")
        super().check_names({k: v for k, v in options.items() if k not in ALLOCATION_OPTIONS}, backend)
