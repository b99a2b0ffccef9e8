"""The `slurm` backend: every attempt of every trial is its own SLURM batch job (sbatch).

Why jobs and not steps inside one allocation: a trial that fails, times out or is cancelled takes
only its own job with it and is retried as a new job; the scheduler places and orders the trials
like any other work on the cluster (fair share, backfill, preemption); the controller needs no
allocation of its own, so it runs on a login node as well as inside a job; and when a node fails,
only the trial on it fails. Steps would tie every trial to one allocation that lives and dies as a
whole and holds every node for the whole run.

For every attempt the backend writes `trials/<id>/slurm-<attempt>.sh` (see `render_batch_script`)
and submits it with `sbatch --parsable` from the run directory, which must be on a filesystem
every node sees. The script, the job's output and the files the job leaves in `trials/<id>/`:

    slurm-<N>.sh       the batch script (paths relative to the run directory; no host or user names)
    slurm-<N>.jobid    the job id, written at submission (used by `reap_orphan` after a crash)
    slurm-<N>.nodes    the job's nodes, one per line, written when it starts
    slurm-<N>.exit     the exit status of the trial program, written by the script's EXIT trap
    stdout.log, stderr.log   appended to (--open-mode=append), one banner line per attempt

One node per slot: the script runs the trial program itself (`--nproc K` processes, one per
device). Several nodes per slot: `srun` starts one `torchrun` per node, which meet through a c10d
rendezvous on the first node of the job (its NodeAddr), and the trial joins that process group.

Options (keyword arguments, from `aiperf-runner run --backend slurm ...`; declared in options.py,
`SlurmOptions`): `partition`, `account`,
`reservation`, `qos`, `constraint` (placement.py: applied to sinfo, the probe and every job), `prologue`, `wrap`,
`trial_python` (launcher.py), `nodes_per_slot` (1), `gpus_per_node` (0: CPU), `time_limit` (sbatch --time), `slots` (cap on the
number of slots; default: every usable node of the partition), `devices_per_slot` (CPU processes
per slot when `gpus_per_node` is 0), `exclusive` (True: one trial per node, with all of its memory,
`--mem=0`, unless `extra_sbatch_args` give a memory option; False: jobs share nodes and `slots` says
how many run at once), `start_wait_s` (0: a launch does not wait for its job to start),
`launch_workers` (8 sbatch calls in flight at once, in threads beside the controller's loop),
`shutdown_wait_s`, `probe`, `probe_timeout_s`, `extra_sbatch_args`.

The package: options.py (the declared options of both backends), commands.py (running sbatch/squeue/scancel/sinfo/sacct and reading what they print, job
states), placement.py (partition, reservation, QOS, constraint: usable nodes and the probe), launcher.py
(prologue and wrapper), steps.py (the `slurm-steps` backend: trials as job steps of the allocation
the controller runs in), script.py (the batch script), backend.py (`SlurmBackend` and `SlurmHandle`). The entry
point `aiperf_runner.backends.slurm:SlurmBackend` and the names below are importable from here.
"""

from __future__ import annotations

from .backend import CANCELLED_STATUS, JOB_PREFIX, SlurmBackend, SlurmHandle
from .commands import (
    ACTIVE_STATES,
    FAILURE_REASONS,
    SlurmError,
    count_gpus,
    describe_state,
    parse_sinfo_nodes,
    parse_squeue,
    run_slurm,
    scancel,
    slurm_env,
)
from .script import render_batch_script

__all__ = [
    "ACTIVE_STATES", "CANCELLED_STATUS", "FAILURE_REASONS", "JOB_PREFIX", "SlurmBackend", "SlurmError",
    "SlurmHandle", "count_gpus", "describe_state", "parse_sinfo_nodes", "parse_squeue", "render_batch_script",
    "run_slurm", "scancel", "slurm_env",
]
