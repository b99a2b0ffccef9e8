"""The handle of a `slurm-steps` attempt (steps.py): its `srun`, or the process a node's zygote forked for it
(warm.py), polled, cancelled and waited for the same way."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time

from aiperf_runner.backends.base import LaunchSpec, Slot, TrialHandle
from aiperf_runner.backends.zygote import ZygoteChild

from .backend import CANCELLED_STATUS
from .commands import failed_nodes


class StepHandle(TrialHandle):
    """One attempt = one job step: the `srun` process that runs it (or, with warm starts, the attempt a node's
    zygote forked: warm.py)."""

    def __init__(self, spec: LaunchSpec, slot: Slot, proc: subprocess.Popen[bytes] | ZygoteChild, name: str,
                 job_id: str) -> None:
        self.spec, self.slot, self.proc, self.name, self.job_id = spec, slot, proc, name, job_id
        self._cancelled = False

    def poll(self) -> int | None:
        rc = self.proc.poll()
        if self._cancelled:
            return CANCELLED_STATUS
        return rc

    def cancel(self) -> None:
        """SIGTERM to srun cancels the step (SLURM kills its tasks on every node). Over at once for
        poll(), without waiting for srun: the backend's shutdown waits for every srun together."""
        if self._cancelled or self.proc.poll() is not None:
            return
        self._cancelled = True
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, deadline: float) -> bool:
        """Wait for srun until `deadline` (time.monotonic()); SIGKILL it if it is still there then.
        False when it had to be killed."""
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            return True
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return False

    def describe_failure(self) -> str:
        rc = self.poll()
        if rc in (None, 0):
            return ""
        what = "cancelled by the runner" if self._cancelled else f"exit status {rc}"
        return f"{what} [SLURM job {self.job_id}, step {self.name}]"

    def lost_node(self) -> str | None:
        """A node of the step that SLURM reports down: the step ended with it (srun waits until
        SLURM declares the node down, and may then exit 0), and steps placed there fail at once."""
        if self._cancelled or self.proc.poll() is None:
            return None
        down = failed_nodes(self.slot.nodes)
        return down[0] if down else None
