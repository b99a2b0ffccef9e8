"""An AIPerf-LLM run's trials through a Backend (backends/base.py), as the image controller runs its own: the
backend opened (`local` by default, `slurm` with `--backend slurm`), the attempts launched, and what the backend
says of the system for run.json.

`open_backend` gives the backend and its slots; `LlmLaunches` starts each attempt: at once with a backend that
launches at once (`local`), else from the backend's `launch_workers` threads (`slurm`: an sbatch can take
minutes on a busy controller), so that the run's loop goes on copying training records and writing heartbeats
meanwhile and takes each launch's outcome on a later pass (run/launches.py does the same for the image
controller). `describe_system` is run.json's `system`: this machine's facts with the backend's (masked) on top.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiperf_runner.backends.base import Backend, LaunchSpec, Slot, TrialHandle, load_backend
from aiperf_runner.rundir import privacy
from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.util import sysinfo

__all__ = ["LAUNCH_FAILURES_IN_A_ROW", "LlmBackendError", "LlmLaunches", "Launched", "attempt_spec",
           "describe_system", "open_backend"]
# A backend that refuses this many launches in a row, with none accepted in between, is broken: the run stops
# rather than burn every proposal's retries on it (the image controller's bound).
LAUNCH_FAILURES_IN_A_ROW = 8


class LlmBackendError(AiperfError, RuntimeError):
    """The run's backend cannot be opened, or refuses every launch."""


def open_backend(name: str, options: dict[str, Any], run_dir: Path, slots: int | None,
                 devices_per_slot: int | None) -> tuple[Backend, list[Slot]]:
    """The backend `name` with `options` (--backend-opt and the slurm options) and its slots."""
    opts = dict(options)
    if name == "local":
        # No warm-start zygote unless asked for: an LLM trial with several ranks spawns them itself
        # (torch.multiprocessing), which a child forked by the zygote and run through runpy is not known to do.
        opts.setdefault("warm_start", False)
    try:
        backend = load_backend(name)(run_dir, slots=slots, devices_per_slot=devices_per_slot, **opts)
        found = backend.slots()
    except (ValueError, TypeError, OSError) as exc:
        raise LlmBackendError(f"backend {name!r}: {exc}") from None
    if not found:
        raise LlmBackendError(f"backend {name!r} offers no slot")
    return backend, found


def describe_system(backend: Backend, slots: list[Slot], masker: privacy.Masker
                    ) -> tuple[dict[str, Any], dict[str, float | None], dict[str, str]]:
    """run.json's `system` (this machine's facts, the backend's masked on top, as an image run records them:
    run/startup.py), and the declared peaks and their sources, from the facts before masking."""
    facts = backend.system_facts()
    host = sysinfo.collect(len(slots), slots[0].world_size, slots[0].device_type)
    nodes = max(int(facts.get("nodes") or 1), len({n for s in slots for n in s.nodes}))
    peaks, sources = sysinfo.declared_peaks({**host, **facts, "nodes": nodes})
    return {**host, **masker.value(facts), "nodes": nodes}, peaks, sources


def attempt_spec(run_dir: Path, trial: str, attempt: int, module: str, env: dict[str, str]) -> LaunchSpec:
    """One attempt of `python -m MODULE TRIAL_DIR`, its output (stdout and stderr) in `attempt-N.out`. Paths are
    absolute: a SLURM job runs in the run directory, where a relative --out would name the wrong place."""
    trial_dir = Path(os.path.abspath(run_dir)) / "trials" / trial
    out = trial_dir / f"attempt-{attempt}.out"
    return LaunchSpec(trial_id=trial, attempt=attempt, argv=(sys.executable, "-m", module, str(trial_dir)),
                      trial_dir=trial_dir, stdout=out, stderr=out, env=env)


@dataclass
class Launched:
    """A launch that returned: its handle, or the exception that refused it."""

    trial: str
    slot: Slot
    handle: TrialHandle | None
    error: BaseException | None


class LlmLaunches:
    """The launches of a run: `start` returns the outcome at once for a backend that launches at once; with
    `launch_workers` it returns None and `done` gives the outcome on a later pass (the handle adopted)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        workers = backend.launch_workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="llm-launch") if workers > 0 else None
        self.pending: dict[int, tuple[str, Slot, Future[TrialHandle]]] = {}  # slot index -> its launch
        self.failures_in_a_row = 0

    def start(self, trial: str, spec: LaunchSpec, slot: Slot) -> Launched | None:
        if self._pool is not None:
            self.pending[slot.index] = (trial, slot, self._pool.submit(self.backend.submit, spec, slot))
            return None
        try:
            return self._count(Launched(trial, slot, self.backend.launch(spec, slot), None))
        except Exception as exc:  # noqa: BLE001 - a launch failure is the attempt's failure
            return self._count(Launched(trial, slot, None, exc))

    def done(self) -> list[Launched]:
        """The launches that returned or failed since the last call, in slot order (handles adopted)."""
        out = []
        for index, (trial, slot, future) in sorted(self.pending.items()):
            if not future.done():
                continue
            del self.pending[index]
            try:
                handle = future.result()
            except Exception as exc:  # noqa: BLE001
                out.append(self._count(Launched(trial, slot, None, exc)))
                continue
            self.backend.adopt(handle)
            out.append(self._count(Launched(trial, slot, handle, None)))
        return out

    def _count(self, launched: Launched) -> Launched:
        self.failures_in_a_row = 0 if launched.handle is not None else self.failures_in_a_row + 1
        if self.failures_in_a_row >= LAUNCH_FAILURES_IN_A_ROW:
            error = launched.error
            raise LlmBackendError(f"the {self.backend.name} backend failed to launch {self.failures_in_a_row} "
                                  f"attempts in a row; the last: {type(error).__name__}: {error}")
        return launched

    def close(self) -> None:
        """Wait for the submit calls still running (each ends within its command's timeouts), so that the
        backend's shutdown, after this, finds every job they made; drop those not begun."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
