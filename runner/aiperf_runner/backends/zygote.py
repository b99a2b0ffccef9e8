"""Warm starts for CPU trials: a process that has imported torch and the trial program forks each
attempt from itself, so that an attempt starts training in milliseconds instead of seconds.

Importing torch and the trial program costs about 2 CPU-seconds; a smoke trial trains for a few
seconds, so a fresh interpreter per attempt spent a third of a CPU slot's time on imports and put
that share of luck (how many trials a run happened to have) into its score. The `local` backend
starts one `Zygote` per run before the clock starts (`Backend.prepare`); each launch asks it to
fork a child that behaves exactly as `python -m MODULE ARGS...` started by `subprocess.Popen` with
`start_new_session=True` would: its own session, stdout/stderr appended to the attempt's files,
stdin from /dev/null, the environment it was given, the module run as `__main__`.

Only CPU slots start this way: a child forked from a process that has touched CUDA cannot use it,
and a GPU trial's start-up is small against its epochs.

The `slurm-steps` backend (option `warm_start`) runs one zygote per node of its allocation as a job step
(`command_prefix`: the step's srun, which carries the protocol over its stdin and stdout). There the controller
cannot signal or look up the children itself: it asks the zygote to signal one (`{"signal": 15, "pid": 1234}`,
its process group), a request's `inherit_env` lays its environment over the zygote's own (the step's SLURM
variables), its `cpu_share` ([index, count]) gives the child that share of the zygote's cores (AIPERF_CPU_SET,
as the local backend gives a slot's), and with `--kill-on-eof` the zygote kills its children when the
controller is gone (no pid file of theirs is on the controller's node).

The child is the zygote's, not the controller's: the zygote reaps it and reports its exit status
(as `Popen.returncode`: negative for a signal) over its stdout. If the controller dies, the zygote
sees end-of-file and exits, leaving running attempts as a killed controller always has (their
pid files let `--resume` kill them). Protocol: one JSON object per line each way.

    -> {"id": 1, "argv": [...], "env": {...}, "cwd": "...", "stdout": "...", "stderr": "..."}
    <- {"ready": true, "preloaded": [...]}     (once, after the imports)
    <- {"id": 1, "pid": 1234} | {"id": 1, "error": "..."}
    <- {"exit": 1234, "rc": 0}
    -> {"signal": 15, "pid": 1234}             (no answer; only to a child of the zygote's)
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from aiperf_runner.spec.errors import AiperfError

PRELOAD = ("aiperf_runner.train.trial",)
READY_TIMEOUT_S = 120.0
ZYGOTE_LOST_RC = 255  # an attempt whose exit status died with the zygote


class ZygoteError(AiperfError, RuntimeError):
    """The zygote could not start, or could not fork an attempt."""


# ---- the controller's side ---------------------------------------------------------------------

class Zygote:
    """The client: starts the zygote process and forks attempts through it. Thread-safe."""

    def __init__(self, preload: Sequence[str] = PRELOAD, log: Path | None = None,
                 run_dir: Path | None = None, command_prefix: Sequence[str] = (), python: str = sys.executable,
                 env: Mapping[str, str] | None = None) -> None:
        """`command_prefix` (e.g. an srun) starts the zygote elsewhere: it is then `remote`, and its children
        are signalled through it (`signal`), never looked up here."""
        self.remote = bool(command_prefix)
        env = dict(os.environ if env is None else env)
        # numpy's OpenBLAS would start a thread pool at import; one thread keeps the zygote single-threaded
        # at every fork (a pool's locks must not be copied held). Trials do not use numpy for compute.
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        err: Any = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - closed below
        try:
            where = ["--run-dir", os.fspath(run_dir)] if run_dir is not None else []
            remote = ["--kill-on-eof"] if self.remote else []
            self._proc = subprocess.Popen([*command_prefix, python, "-m", __name__, *remote, *where, *preload],
                                          stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True,
                                          close_fds=True)
        finally:
            if log is not None:
                err.close()
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._in: IO[bytes] = self._proc.stdin
        self._out: IO[bytes] = self._proc.stdout
        self._lock = threading.Lock()
        self._next_id = 0
        self._exits: dict[int, int] = {}
        self._replies: dict[int, dict[str, Any]] = {}
        self._buffer = b""
        self.ready: bool | None = None  # None until the zygote said; False when it failed
        self.preloaded: list[str] = []
        self.failure = ""

    @property
    def pid(self) -> int:
        return self._proc.pid

    def wake_fd(self) -> int | None:
        """The pipe that becomes readable when the zygote reports an exit (None once it is gone:
        at end-of-file it would stay readable)."""
        return self._out.fileno() if self.ready else None

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> bool:
        """Block until the zygote has made its imports (True), or failed or timed out (False)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.ready is None:
                if not self._read(max(0.0, deadline - time.monotonic())) and time.monotonic() >= deadline:
                    self.ready, self.failure = False, f"not ready after {timeout:g} s"
        return bool(self.ready)

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: str | os.PathLike[str],
              stdout: Path, stderr: Path, *, inherit_env: bool = False,
              cpu_share: tuple[int, int] | None = None) -> ZygoteChild:
        """Fork `python -m MODULE ARGS...` (argv as given to Popen) from the zygote. `inherit_env`: `env`
        laid over the zygote's environment; `cpu_share` (index, count): that share of the zygote's cores."""
        if len(argv) < 3 or argv[1] != "-m":
            raise ZygoteError(f"the zygote runs `python -m MODULE ...` only, not {list(argv)[:3]}")
        with self._lock:
            if not self.ready:
                raise ZygoteError(f"the zygote is not running: {self.failure or 'not ready'}")
            self._next_id += 1
            ask = self._next_id
            request: dict[str, Any] = {"id": ask, "argv": list(argv), "env": dict(env), "cwd": os.fspath(cwd),
                                       "stdout": os.fspath(stdout), "stderr": os.fspath(stderr)}
            if inherit_env:
                request["inherit_env"] = True
            if cpu_share is not None:
                request["cpu_share"] = list(cpu_share)
            self._write(request)
            deadline = time.monotonic() + 30.0
            while ask not in self._replies:
                if not self._read(max(0.0, deadline - time.monotonic())) and time.monotonic() >= deadline:
                    raise ZygoteError("the zygote did not answer a fork request within 30 s")
                if self.ready is False:
                    raise ZygoteError(f"the zygote is gone: {self.failure}")
            reply = self._replies.pop(ask)
        if "pid" not in reply:
            raise ZygoteError(f"the zygote could not start the attempt: {reply.get('error')}")
        return ZygoteChild(self, int(reply["pid"]))

    def signal(self, pid: int, sig: int) -> bool:
        """Ask the zygote to send `sig` to its child `pid`'s process group. False when it is gone."""
        with self._lock:
            try:
                self._write({"signal": int(sig), "pid": int(pid)})
            except ZygoteError:
                return False
            return True

    def returncode(self, pid: int) -> int | None:
        """The child's exit status once the zygote has reported it (None while it runs)."""
        with self._lock:
            if pid not in self._exits:
                self._read(0.0)
            # A remote zygote's children ended with it (its step, or --kill-on-eof): no pid of theirs is here.
            if pid not in self._exits and self.ready is False and (self.remote or not _pid_alive(pid)):
                self._exits[pid] = ZYGOTE_LOST_RC  # its status went with the zygote
            return self._exits.get(pid)

    def forget(self, pid: int) -> None:
        with self._lock:
            self._exits.pop(pid, None)

    def close(self) -> None:
        """Stop the zygote (its running children are the caller's to cancel first)."""
        with contextlib.suppress(OSError):
            self._in.close()
        try:
            self._proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        with contextlib.suppress(OSError):
            self._out.close()

    # Called with the lock held.
    def _write(self, request: Mapping[str, Any]) -> None:
        if self.ready is False:
            raise ZygoteError(f"the zygote is gone: {self.failure}")
        try:
            self._in.write(json.dumps(request).encode() + b"\n")
            self._in.flush()
        except OSError as exc:
            self._lost(f"cannot write to it: {exc}")
            raise ZygoteError(f"the zygote is gone: {exc}") from None

    # Called with the lock held: read what the zygote wrote, waiting at most `timeout` seconds.
    def _read(self, timeout: float) -> bool:
        if self.ready is False:
            return False
        fd = self._out.fileno()
        readable, _, _ = select.select([fd], [], [], timeout)
        if not readable:
            return False
        chunk = os.read(fd, 65536)
        if not chunk:
            self._lost(f"it exited with status {self._proc.wait()}")
            return False
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.strip():
                self._message(json.loads(line))
        return True

    def _message(self, msg: dict[str, Any]) -> None:
        if "exit" in msg:
            self._exits[int(msg["exit"])] = int(msg["rc"])
        elif "ready" in msg:
            self.ready = bool(msg["ready"])
            self.preloaded = list(msg.get("preloaded") or [])
            self.failure = str(msg.get("error") or "")
        elif "id" in msg:
            self._replies[int(msg["id"])] = msg

    def _lost(self, why: str) -> None:
        self.ready = False
        self.failure = self.failure or why


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


class ZygoteChild:
    """An attempt forked by the zygote, with the part of `subprocess.Popen` the local backend uses."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self._zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.returncode(self.pid)
            if self.returncode is not None:
                self._zygote.forget(self.pid)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the child's process group through the zygote (a remote zygote's children are not here)."""
        if self.poll() is None:
            self._zygote.signal(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode


# ---- the zygote process ------------------------------------------------------------------------

def _send(msg: dict[str, Any]) -> None:
    os.write(1, json.dumps(msg).encode() + b"\n")


_children: set[int] = set()  # the zygote's children still running


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        _children.discard(pid)
        _send({"exit": pid, "rc": rc})


def _child(request: dict[str, Any], wakeup_fds: Sequence[int]) -> None:
    """In the forked child: become what Popen(start_new_session=True) would have started. Never returns."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        for fd in wakeup_fds:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        for src, dst in ((null, 0), (out, 1), (err, 2)):
            os.dup2(src, dst)
            os.close(src)
        os.chdir(request["cwd"])
        if not request.get("inherit_env"):
            os.environ.clear()
        os.environ.update(request["env"])
        if request.get("cpu_share"):
            _take_cpu_share(*request["cpu_share"])
        # A fresh interpreter would have put these first on its path (before site-packages).
        for entry in reversed([e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]):
            if entry not in sys.path:
                sys.path.insert(1 if sys.path else 0, entry)
        _apply_thread_settings()
        argv = list(request["argv"])
        sys.argv = ["-m", *argv[3:]]
        import runpy
        import warnings

        # The module was preloaded on purpose: runpy's warning about it would open every attempt's stderr.
        warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package",
                                category=RuntimeWarning)
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | type(None)):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reported as the interpreter would, then a non-zero exit
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _take_cpu_share(index: int, count: int) -> None:
    """This child's share of the zygote's cores, as srun's binding would give a step of its own: its affinity,
    AIPERF_CPU_SET (util/cpubind.py) and SLURM_CPUS_ON_NODE, which the trial programs size their threads by (two
    attempts each sizing for the whole node spun their OpenMP threads against each other: over 6x slower)."""
    from aiperf_runner.util.cpubind import CPU_SET_ENV, core_groups, format_cpulist, share

    cpus = share(core_groups(os.sched_getaffinity(0)), index, count) if count > 1 else []
    if cpus:
        os.sched_setaffinity(0, cpus)
        os.environ[CPU_SET_ENV] = format_cpulist(cpus)
        if "SLURM_CPUS_ON_NODE" in os.environ:
            os.environ["SLURM_CPUS_ON_NODE"] = str(len(cpus))


def _kill_children() -> None:
    for pid in list(_children):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def _apply_thread_settings() -> None:
    """OpenMP read OMP_NUM_THREADS when the zygote loaded torch; the attempt's own value applies now."""
    torch = sys.modules.get("torch")
    threads = os.environ.get("OMP_NUM_THREADS")
    if torch is not None and threads and threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


def _preload(preload: Sequence[str], run_dir: str | None) -> tuple[list[str], str]:
    """Import each module; a module's `warm_up(run_dir)` (the trial program's: its lazy imports
    and its data) runs too. What fails is left to each child to do for itself."""
    import importlib

    loaded, error = [], ""
    for name in preload:
        try:
            module = importlib.import_module(name)
            warm_up = getattr(module, "warm_up", None)
            if run_dir is not None and callable(warm_up):
                warm_up(Path(run_dir))
            loaded.append(name)
        except Exception as exc:  # noqa: BLE001 - the child imports it again and fails there, visibly
            error = f"{name}: {type(exc).__name__}: {exc}"
            print(f"zygote: cannot preload {error}", file=sys.stderr, flush=True)
    return loaded, error


def serve(preload: Sequence[str], run_dir: str | None = None, kill_on_eof: bool = False) -> int:
    loaded, error = _preload(preload, run_dir)
    if len(os.listdir("/proc/self/task")) > 1:
        # A thread's locks (malloc's, a thread pool's) would be copied held into every child.
        _send({"ready": False, "error": f"the preloads started threads ({loaded}): forking is not safe"})
        return 1
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
        _send({"ready": False, "error": "CUDA was initialised by the preloads: forked children could not use it"})
        return 1
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle
    _send({"ready": True, "preloaded": loaded, **({"error": error} if error else {})})
    buffer = b""
    while True:
        try:
            readable, _, _ = select.select([0, wake_r], [], [], 5.0)
        except InterruptedError:
            readable = []
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        _reap()
        if 0 not in readable:
            continue
        chunk = os.read(0, 1 << 20)
        if not chunk:  # the controller is gone
            if kill_on_eof:
                _kill_children()
            return 0
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            request = json.loads(line)
            if "signal" in request:
                if int(request["pid"]) in _children:  # its own child's group only, never another pid
                    with contextlib.suppress(OSError):
                        os.killpg(int(request["pid"]), int(request["signal"]))
                continue
            try:
                pid = os.fork()
            except OSError as exc:
                _send({"id": request.get("id"), "error": f"fork failed: {exc}"})
                continue
            if pid == 0:
                _child(request, (wake_r, wake_w))
            _children.add(pid)
            _send({"id": request["id"], "pid": pid})


def main(argv: Sequence[str]) -> int:
    """python -m aiperf_runner.backends.zygote [--kill-on-eof] [--run-dir DIR] MODULE..."""
    args = list(argv)
    kill_on_eof = args[:1] == ["--kill-on-eof"]
    if kill_on_eof:
        args = args[1:]
    run_dir = None
    if args[:1] == ["--run-dir"]:
        run_dir, args = args[1], args[2:]
    return serve(args, run_dir, kill_on_eof)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
