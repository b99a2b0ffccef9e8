"""The `inprocess` backend, for tests: every attempt runs in a thread of the controller's process.

An attempt runs either a Python callable given as the `target` option,
`target(spec, slot, cancel_event) -> int`, or the module named in its argv
(`python -m MODULE ARGS...`): `MODULE.main(ARGS)` is called, with `cancel=<threading.Event>` when
`main` accepts a `cancel` keyword. A `SystemExit` becomes the exit status; any other exception is
written to the attempt's stderr file and gives status 1.

Cancellation is cooperative: `cancel()` sets the event and gives the attempt a moment to return;
`poll()` then reports a non-zero status at once, whatever the thread still does. Nothing here
creates a process, so nothing can be left behind.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiperf_runner.backends.base import Backend, LaunchSpec, Slot, TrialHandle
from aiperf_runner.backends.options import BackendOptionError, BackendOptions, option

Target = Callable[[LaunchSpec, Slot, threading.Event], int]
CANCELLED = -int(signal.SIGTERM)


def module_target(spec: LaunchSpec, slot: Slot, cancel: threading.Event) -> int:
    """Run `python -m MODULE ARGS...` as MODULE.main(ARGS) in this thread."""
    argv = list(spec.argv)
    if "-m" not in argv:
        raise ValueError(f"inprocess backend runs `python -m MODULE ...` or a target callable, not {argv!r}")
    i = argv.index("-m")
    module = importlib.import_module(argv[i + 1])
    main = module.main
    args = argv[i + 2:]
    try:
        accepts_cancel = "cancel" in inspect.signature(main).parameters
    except (TypeError, ValueError):
        accepts_cancel = False
    result = main(args, cancel=cancel) if accepts_cancel else main(args)
    return int(result or 0)


class InProcessHandle(TrialHandle):
    def __init__(self, spec: LaunchSpec, slot: Slot, target: Target) -> None:
        self.spec = spec
        self.slot = slot
        self.cancel_event = threading.Event()
        self._returncode: int | None = None
        self._error = ""
        self._cancelled = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, args=(target,), daemon=True,
                                        name=f"trial-{spec.trial_id}-{spec.attempt}")
        self._thread.start()

    def _run(self, target: Target) -> None:
        err = io.StringIO()
        try:
            rc = target(self.spec, self.slot, self.cancel_event)
        except SystemExit as exc:
            code = exc.code
            rc = code if isinstance(code, int) else (0 if code is None else 1)
            if code is not None and not isinstance(code, int):
                err.write(f"{code}\n")
        except BaseException as exc:  # noqa: BLE001 - any failure is the attempt's failure
            rc = 1
            err.write(traceback.format_exc())
            self._error = f"{type(exc).__name__}: {exc}"
        if err.getvalue():
            with contextlib.suppress(OSError), open(self.spec.stderr, "a") as fh:
                fh.write(err.getvalue())
        with self._lock:
            if self._returncode is None:
                self._returncode = CANCELLED if self._cancelled and rc == 0 else int(rc)

    def poll(self) -> int | None:
        with self._lock:
            return self._returncode

    def cancel(self) -> None:
        if self.poll() is not None:
            return
        self._cancelled = True
        self.cancel_event.set()
        self._thread.join(timeout=2.0)
        with self._lock:
            if self._returncode is None or self._returncode == 0:
                self._returncode = CANCELLED

    def describe_failure(self) -> str:
        if self._cancelled:
            return "cancelled"
        if self._error:
            return self._error
        return "" if not self._returncode else f"exit status {self._returncode}"


def _callable(name: str, value: Any) -> Target:
    if not callable(value):
        raise BackendOptionError(f"backend option {name} must be a callable, not {value!r}")
    return value


@dataclass(frozen=True)
class InProcessOptions(BackendOptions):
    """`slots` (default 1), `devices_per_slot` (default 1), `target` (a callable; default: run the
    argv's module)."""

    target: Target | None = option(None, parse=_callable)


class InProcessBackend(Backend):
    """Attempts as threads of this process; options: `InProcessOptions`."""

    name = "inprocess"
    options_class = InProcessOptions
    options: InProcessOptions

    def __init__(self, run_dir: Path, **options: Any) -> None:
        super().__init__(run_dir, **options)
        self._slots = [Slot(index=i, nodes=("localhost",), devices_per_node=self.devices_per_slot, device_type="cpu")
                       for i in range(self.requested_slots or 1)]
        self._target: Target = self.options.target or module_target
        self._handles: list[InProcessHandle] = []

    def slots(self) -> list[Slot]:
        return list(self._slots)

    def launch(self, spec: LaunchSpec, slot: Slot) -> InProcessHandle:
        for path in (spec.stdout, spec.stderr):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        handle = InProcessHandle(spec, slot, self._target)
        self._handles = [h for h in self._handles if h.poll() is None]
        self._handles.append(handle)
        return handle

    def system_facts(self) -> dict[str, Any]:
        return {"nodes": 1}

    def shutdown(self) -> None:
        for handle in self._handles:
            handle.cancel()
        self._handles = []
