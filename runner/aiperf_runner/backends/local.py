"""The `local` backend: every slot is a set of subprocesses on this machine.

Each attempt runs in its own process group (session), so cancelling it kills the whole tree (the
trial program and the DDP workers it spawns). The machine's devices are split between the slots:
with CUDA, `devices_per_slot` GPUs per slot through CUDA_VISIBLE_DEVICES; on CPU, every slot runs
`devices_per_slot` processes and each process gets `cores // (slots * devices_per_slot)` threads
(OMP_NUM_THREADS), so the slots do not fight over the cores, and with several slots its own share
of the cores ($AIPERF_CPU_SET, whole physical cores), within which the trial pins its ranks
(util/cpubind.py; not with `--no-cpu-bind`).

The process id of every running attempt is written to `trials/<id>/pid` (removed when the attempt
ends), so that a controller resuming after a crash can kill what its predecessor left running
(`reap_orphan`).

The controller learns of an attempt's new log lines from inotify and of its end from its exit
status (`wait_changed`, filewatch.py), not by looking at every trial's log 10 times a second.

On CPU, attempts start warm: a zygote process that imported torch and the trial program before
the run's clock started forks each one (zygote.py; option `warm_start`, default on), so an attempt
trains within milliseconds of its launch instead of spending 2 CPU-seconds on imports.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiperf_runner.backends.base import Backend, LaunchSpec, Slot, TrialHandle
from aiperf_runner.backends.filewatch import FileWatch
from aiperf_runner.backends.options import BackendOptions, option
from aiperf_runner.backends.zygote import Zygote, ZygoteChild, ZygoteError
from aiperf_runner.spec.runio import EVENTS
from aiperf_runner.util.cpubind import CPU_SET_ENV, core_groups, format_cpulist, share

PID_FILE = "pid"
CANCEL_GRACE_S = 2.0


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cuda_device_count() -> int:
    """Visible CUDA devices, without importing torch when there is plainly no GPU."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return 0
    if not (Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia").exists()):
        return 0
    try:
        import torch
    except ImportError:
        return 0
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver means no usable GPU
        return 0


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of a process, or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[19])  # fields 3 and 22 overall
    except (IndexError, ValueError):
        return None


def _proc_start_time(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def _alive(pid: int, start_time: int | None) -> bool:
    """The process with this pid and start time exists and is not a zombie."""
    stat = _proc_stat(pid)
    return stat is not None and stat[0] != "Z" and (start_time is None or stat[1] == start_time)


def _kill_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _group_alive(pgid: int) -> bool:
    return _kill_group(pgid, 0)


def describe_returncode(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        hint = " (out of memory?)" if rc == -signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit status {rc}"


class LocalHandle(TrialHandle):
    def __init__(self, spec: LaunchSpec, slot: Slot, proc: subprocess.Popen[bytes] | ZygoteChild,
                 pid_file: Path) -> None:
        self.spec = spec
        self.slot = slot
        self.proc = proc
        self.pgid = proc.pid  # start_new_session: the leader's pid is the group id
        self._pid_file = pid_file
        self._cancelled = False
        self._returncode: int | None = None
        # Readable when a cold-started attempt exits, so that the controller wakes at once.
        self.pidfd: int | None = None
        if isinstance(proc, subprocess.Popen) and hasattr(os, "pidfd_open"):
            with contextlib.suppress(OSError):
                self.pidfd = os.pidfd_open(proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _finish(self, rc: int) -> int:
        # Whatever the leader left behind (DDP workers of a crashed trial) goes with it.
        _kill_group(self.pgid, signal.SIGKILL)
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        try:
            self._pid_file.unlink()
        except FileNotFoundError:
            pass
        if self._cancelled and rc == 0:
            rc = -signal.SIGTERM  # cancelled: never report success
        self._returncode = rc
        return rc

    def poll(self) -> int | None:
        if self._returncode is not None:
            return self._returncode
        rc = self.proc.poll()
        if rc is None:
            return None
        return self._finish(rc)

    def cancel(self) -> None:
        if self._returncode is not None:
            return
        self._cancelled = True
        _kill_group(self.pgid, signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=CANCEL_GRACE_S)
        except subprocess.TimeoutExpired:
            _kill_group(self.pgid, signal.SIGKILL)
            rc = self.proc.wait()
        self._finish(rc)

    def describe_failure(self) -> str:
        if self._returncode is None:
            return ""
        if self._cancelled:
            return "cancelled"
        return describe_returncode(self._returncode)


@dataclass(frozen=True)
class LocalOptions(BackendOptions):
    """`slots` (default 1), `devices_per_slot` (default 1 with CUDA, on CPU the cores shared out
    between the slots), `device_type` (default: cuda when a GPU is visible), `threads_per_process`
    (default: the cores shared out evenly), `warm_start` (CPU attempts forked by a zygote)."""

    device_type: str | None = option(None, choices=("cpu", "cuda"))
    threads_per_process: int | None = option(None, minimum=1)
    warm_start: bool = True


class LocalBackend(Backend):
    """Slots as subprocesses on this machine; options: `LocalOptions`."""

    name = "local"
    options_class = LocalOptions
    options: LocalOptions

    def __init__(self, run_dir: Path, **options: Any) -> None:
        super().__init__(run_dir, **options)
        self.n_slots = self.requested_slots or 1
        device_type = self.options.device_type
        gpus = cuda_device_count() if device_type in (None, "cuda") else 0
        if device_type is None:
            device_type = "cuda" if gpus else "cpu"
        self.device_type = device_type
        if device_type == "cuda":
            need = self.n_slots * self.devices_per_slot
            if need > gpus:
                raise ValueError(f"{self.n_slots} slots x {self.devices_per_slot} devices need {need} GPUs; "
                                 f"{gpus} visible")
        self.cores = cpu_count()
        if device_type == "cpu" and self.options.devices_per_slot is None:
            # One slot uses the whole machine it is given: a process per core, one thread each. One
            # process of two intra-op threads trained the smoke seed at 53 images/s, against 2,200-3,300
            # with one thread, whenever anything else needed a core (each operator waits at a barrier
            # for its slowest thread).
            self.devices_per_slot = max(1, self.cores // self.n_slots)
        self.threads = (self.options.threads_per_process
                        or max(1, self.cores // (self.n_slots * self.devices_per_slot)))
        self._slots = [
            Slot(index=i, nodes=("localhost",), devices_per_node=self.devices_per_slot,
                 device_type=device_type,
                 device_ids=tuple(range(i * self.devices_per_slot, (i + 1) * self.devices_per_slot))
                 if device_type == "cuda" else ())
            for i in range(self.n_slots)
        ]
        self._handles: list[LocalHandle] = []
        self.warm_start = device_type == "cpu" and self.options.warm_start
        self._zygote: Zygote | None = None
        self.zygote_note = ""  # why attempts start cold, when warm starts were asked for
        # Every trial writes on this machine: inotify sees each line; waitpid says when one ended,
        # and the zygote's report or a pidfd wakes the controller for it.
        self._watch = FileWatch(ended=lambda h: h.poll() is not None, writes_here=True, wake_fds=self._wake_fds)

    def slots(self) -> list[Slot]:
        return list(self._slots)

    def _wake_fds(self) -> list[int]:
        """What becomes readable when a running attempt ends (FileWatch.wait)."""
        running = [h for h in self._handles if h._returncode is None]
        fds = [h.pidfd for h in running if h.pidfd is not None]
        if self._zygote is not None and any(isinstance(h.proc, ZygoteChild) for h in running):
            fd = self._zygote.wake_fd()
            if fd is not None:
                fds.append(fd)
        return fds

    def slot_env(self, slot: Slot) -> dict[str, str]:
        env = {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        if slot.device_type == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in slot.device_ids)
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
            if self.n_slots > 1:
                cpus = share(core_groups(os.sched_getaffinity(0)), slot.index, self.n_slots)
                if cpus:
                    env[CPU_SET_ENV] = format_cpulist(cpus)
        return env

    def prepare(self, trial_argv: tuple[str, ...]) -> None:
        """Start the zygote (CPU slots) and wait for its imports, before the run's clock starts."""
        if not self.warm_start or self._zygote is not None:
            return
        if not (len(trial_argv) >= 3 and trial_argv[1] == "-m" and trial_argv[0] == sys.executable):
            self.warm_start = False  # the zygote runs `python -m MODULE` programs only
            return
        preload = [trial_argv[2]]  # the trial program, with torch and whatever its warm_up() loads
        log = self.run_dir / "local" / "zygote.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        zygote = Zygote(preload, log=log, run_dir=self.run_dir.resolve())
        if zygote.wait_ready():
            self._zygote = zygote
        else:  # attempts start cold, as they always could
            self.zygote_note = zygote.failure
            zygote.close()
            self.warm_start = False

    def _start(self, spec: LaunchSpec, env: dict[str, str]) -> subprocess.Popen[bytes] | ZygoteChild:
        if self._zygote is not None and spec.argv[:1] == (sys.executable,):
            try:
                return self._zygote.spawn(spec.argv, env, os.getcwd(), spec.stdout, spec.stderr)
            except ZygoteError as exc:  # start this one cold; so will the later ones
                self.zygote_note = str(exc)
                self._zygote = None
        with open(spec.stdout, "ab") as out, open(spec.stderr, "ab") as err:
            return subprocess.Popen(list(spec.argv), stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True, close_fds=True)

    def launch(self, spec: LaunchSpec, slot: Slot) -> LocalHandle:
        env = {**os.environ, **self.slot_env(slot), **spec.env}
        spec.stdout.parent.mkdir(parents=True, exist_ok=True)
        spec.stderr.parent.mkdir(parents=True, exist_ok=True)
        spec.trial_dir.mkdir(parents=True, exist_ok=True)
        proc = self._start(spec, env)
        pid_file = spec.trial_dir / PID_FILE
        record = {"pid": proc.pid, "pgid": proc.pid, "start_time": _proc_start_time(proc.pid),
                  "attempt": spec.attempt}
        tmp = pid_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, pid_file)
        handle = LocalHandle(spec, slot, proc, pid_file)
        self._handles = [h for h in self._handles if h.poll() is None]
        self._handles.append(handle)
        self._watch.add(handle, [spec.trial_dir / EVENTS])
        return handle

    def wait_changed(self, timeout: float) -> set[TrialHandle] | None:
        return self._watch.wait(timeout)

    def reap_orphan(self, trial_dir: Path) -> str | None:
        """Kill the process group a previous controller left running for this trial."""
        pid_file = Path(trial_dir) / PID_FILE
        try:
            record = json.loads(pid_file.read_text())
            pid, pgid = int(record["pid"]), int(record.get("pgid", record["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        start_time = record.get("start_time")
        stat = _proc_stat(pid)
        # A pid now used by another program is left alone. While the group has members, Linux does
        # not hand its id out again, so a live group whose leader is gone is still ours.
        ours = (stat is not None and stat[1] == start_time) or (stat is None and _group_alive(pgid))
        message = None
        if ours:
            _kill_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + CANCEL_GRACE_S
            while _alive(pid, start_time) and time.monotonic() < deadline:
                time.sleep(0.05)
            _kill_group(pgid, signal.SIGKILL)
            message = f"killed orphaned process group {pgid}"
        pid_file.unlink(missing_ok=True)
        return message

    def system_facts(self) -> dict[str, Any]:
        return {"nodes": 1}

    def shutdown(self) -> None:
        for handle in self._handles:
            handle.cancel()
        self._handles = []
        self._watch.close()
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

