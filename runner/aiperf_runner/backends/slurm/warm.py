"""Warm starts inside a SLURM allocation (the `slurm-steps` backend's option `warm_start`): one zygote per
node of the run (backends/zygote.py), started as a job step before the run's clock starts, forks every attempt
of a one-node slot there, so that an attempt starts training without a new step, a new interpreter or torch's
imports.

The zygote's step is `srun --overlap` on its node with all of the node's memory (and the node's GPUs when
`gpus_per_node` is set), under the site's prologue and wrapper like every trial's step; srun carries the
zygote's protocol over its stdin and stdout. An attempt forked there has the step's environment with the
attempt's own laid over it, and is bound to its slot's share of the node's cores (slots that share a node split
them, as the cold steps' `--cpus-per-task` does). The controller signals attempts through their zygote; when the
controller is gone the zygote kills them and ends (`--kill-on-eof`), and so does its step.

A node whose zygote is not ready within `READY_TIMEOUT_S`, or stops answering, goes back to a cold step per
attempt (the reason is kept in `notes`, printed by the run). Slots of several nodes always start cold: their
processes meet through torchrun on every node.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from aiperf_runner.backends.base import LaunchSpec, Slot
from aiperf_runner.backends.zygote import ZYGOTE_LOST_RC, Zygote, ZygoteError

from .backend import JOB_PREFIX
from .handle import StepHandle

STOP_GRACE_S = 10.0  # a cancelled attempt's SIGTERM before its SIGKILL, at shutdown


class WarmHandle(StepHandle):
    """One attempt forked by its node's zygote: a StepHandle whose process is the zygote's child (signalled
    through the zygote: cancel sends SIGTERM to its process group, wait_exit a SIGKILL at the deadline)."""

    def describe_failure(self) -> str:
        rc = self.poll()
        if rc in (None, 0):
            return ""
        if self._cancelled:
            what = "cancelled by the runner"
        elif rc == ZYGOTE_LOST_RC:
            what = "its node's warm-start process (zygote) ended under it"
        else:
            what = f"exit status {rc}"
        return f"{what} [SLURM job {self.job_id}, forked on {self.slot.nodes[0]}]"


class WarmStarts:
    """The zygotes of one run, one per node, and the attempts they fork."""

    def __init__(self, run_dir: Path, job_id: str, log_dir: Path) -> None:
        self.run_dir, self.job_id, self.log_dir = run_dir, job_id, log_dir
        self.zygotes: dict[str, Zygote] = {}
        self.notes: list[str] = []  # why a node's attempts start cold

    def step_name(self, index: int) -> str:
        return f"{JOB_PREFIX}.{self.job_id}.zygote.{index}"

    def start(self, nodes: Sequence[str], srun: Sequence[str], prefix: Sequence[str], python: str, module: str,
              env: Mapping[str, str], gpus_per_node: int) -> None:
        """Start a zygote on each of `nodes` at once, then wait for each one's imports (before the clock)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        started: dict[str, Zygote] = {}
        for index, node in enumerate(nodes):
            step = [*srun, "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--mem=0", "--unbuffered",
                    f"--job-name={self.step_name(index)}", *([f"--gres=gpu:{gpus_per_node}"] if gpus_per_node else [])]
            try:
                started[node] = Zygote([module], log=self.log_dir / f"zygote-{index}.log", run_dir=self.run_dir,
                                       command_prefix=[*step, *prefix], python=python, env=env)
            except OSError as exc:
                self.notes.append(f"{node}: cannot start its zygote step: {exc}")
        for node, zygote in started.items():
            if zygote.wait_ready():
                self.zygotes[node] = zygote
            else:
                self.notes.append(f"{node}: attempts start cold: {zygote.failure}")
                zygote.close()

    def spawn(self, spec: LaunchSpec, slot: Slot, argv: Sequence[str], env: Mapping[str, str],
              share: tuple[int, int], name: str) -> WarmHandle | None:
        """The attempt forked on its slot's node; None where it must start cold (and the node from now on)."""
        node = slot.nodes[0]
        zygote = self.zygotes.get(node)
        if zygote is None:
            return None
        try:
            child = zygote.spawn(argv, env, self.run_dir, Path(os.path.abspath(spec.stdout)),
                                 Path(os.path.abspath(spec.stderr)), inherit_env=True, cpu_share=share)
        except ZygoteError as exc:
            self.notes.append(f"{node}: attempts start cold from now on: {exc}")
            self.zygotes.pop(node, None)
            with contextlib.suppress(Exception):
                zygote.close()
            return None
        return WarmHandle(spec, slot, child, name, self.job_id)

    def close(self) -> None:
        """Stop every zygote: it kills what it still runs, and its step ends."""
        for zygote in self.zygotes.values():
            with contextlib.suppress(Exception):
                zygote.close()
        self.zygotes.clear()


def trial_module(trial_argv: Sequence[str]) -> str | None:
    """The module of a `python -m MODULE ...` trial program (what a zygote preloads), else None."""
    return trial_argv[2] if len(trial_argv) >= 3 and trial_argv[1] == "-m" else None
