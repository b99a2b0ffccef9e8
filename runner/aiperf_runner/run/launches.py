"""Attempts whose launch is in flight, for a backend whose launches may block (`launch_workers`).

Their submit calls (sbatch: a second, or minutes when the scheduler is slow) run in a few threads;
the controller's loop goes on meanwhile: it copies epochs, closes attempts and writes heartbeats,
and takes each launch's outcome on a later pass. Nothing here writes the log.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from aiperf_runner.backends.base import Backend, LaunchSpec, Slot, TrialHandle
from aiperf_runner.run.state import TrialState


@dataclass
class Launching:
    trial: TrialState
    attempt: int
    slot: Slot
    future: Future[TrialHandle]


class Launches:
    """The launches in flight, by slot; `background` is False for a backend that launches at once."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        workers = backend.launch_workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="launch") if workers > 0 else None
        self.pending: dict[int, Launching] = {}  # slot index -> its launch

    @property
    def background(self) -> bool:
        return self._pool is not None

    def start(self, trial: TrialState, attempt: int, slot: Slot, spec: LaunchSpec) -> None:
        assert self._pool is not None
        self.pending[slot.index] = Launching(trial, attempt, slot, self._pool.submit(self.backend.submit, spec, slot))

    def trials(self) -> set[str]:
        return {launch.trial.trial for launch in self.pending.values()}

    def done(self) -> list[Launching]:
        """The launches that returned or failed since the last call, in slot order."""
        out = [launch for _, launch in sorted(self.pending.items()) if launch.future.done()]
        for launch in out:
            del self.pending[launch.slot.index]
        return out

    def close(self) -> None:
        """Wait for the submit calls still running (each ends within its command's timeouts), so
        that the backend's shutdown, after this, finds every job they made; drop those not begun."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
