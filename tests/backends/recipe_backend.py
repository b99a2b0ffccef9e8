"""The "a backend" recipe of docs/internals.md ("Extending"), followed once: a backend that runs each
attempt as a plain subprocess under `nice`, with one option of its own. The conformance suite runs
it as the case "recipe" (tests/backends/conftest.py); a site's own backend is built the same way and
registered with an entry point in its own package."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiperf_runner.backends.base import Backend, LaunchSpec, Slot, TrialHandle
from aiperf_runner.backends.options import BackendOptions, option


@dataclass(frozen=True)
class NiceOptions(BackendOptions):
    """`slots`, `devices_per_slot` (shared) and `niceness`: added to each attempt's nice value."""

    niceness: int = option(0, minimum=0)


class NiceHandle(TrialHandle):
    def __init__(self, spec: LaunchSpec, slot: Slot, proc: subprocess.Popen[bytes]) -> None:
        self.spec, self.slot, self.proc = spec, slot, proc

    def poll(self) -> int | None:
        return self.proc.poll()

    def cancel(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the attempt's whole process group
            self.proc.wait()


class NiceBackend(Backend):
    """Every slot one subprocess on this machine, started `nice`-ed by `niceness`."""

    name = "nice"
    options_class = NiceOptions
    options: NiceOptions

    def __init__(self, run_dir: Path, **options: Any) -> None:
        super().__init__(run_dir, **options)
        self.handles: list[NiceHandle] = []

    def slots(self) -> list[Slot]:
        return [Slot(index=i, devices_per_node=self.devices_per_slot) for i in range(self.requested_slots or 1)]

    def launch(self, spec: LaunchSpec, slot: Slot) -> TrialHandle:
        niceness = self.options.niceness

        def start() -> None:
            os.setsid()
            os.nice(niceness)

        with open(spec.stdout, "ab") as out, open(spec.stderr, "ab") as err:
            proc = subprocess.Popen(spec.argv, stdout=out, stderr=err, env={**os.environ, **spec.env},
                                    preexec_fn=start)
        handle = NiceHandle(spec, slot, proc)
        self.handles.append(handle)
        return handle

    def system_facts(self) -> dict[str, Any]:
        # Raw facts: the run masks host names before anything is published.
        return {"launcher": "nice", "host": os.uname().nodename}

    def shutdown(self) -> None:
        for handle in self.handles:
            handle.cancel()
