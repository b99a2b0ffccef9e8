"""Warm starts (backends/zygote.py): an attempt forked by the zygote is started as a cold one is, and
what can go wrong with the zygote never loses an attempt's exit status or a launch."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from pathlib import Path

import pytest
from aiperf_runner.backends.local import LocalBackend
from aiperf_runner.backends.zygote import ZYGOTE_LOST_RC, Zygote, ZygoteError

from tests.backends.test_conformance import spec_for, wait_done, wait_for

FAKE = (sys.executable, "-m", "tests.backends.fake_trial")


def _backend(run_dir: Path, warm: bool) -> LocalBackend:
    run_dir.mkdir(parents=True, exist_ok=True)
    backend = LocalBackend(run_dir, slots=2, devices_per_slot=1, device_type="cpu", warm_start=warm)
    backend.prepare(FAKE)
    return backend


def _facts(backend: LocalBackend) -> dict:
    spec = spec_for(backend, "t0000", "facts", env={"FAKE_TRIAL_VAR": "x"})
    handle = backend.launch(spec, backend.slots()[1])
    assert wait_done(handle) == 0, spec.stderr.read_text()
    return json.loads((spec.trial_dir / "out" / "facts.json").read_text())


def test_a_warm_attempt_is_started_as_a_cold_one(tmp_path: Path) -> None:
    warm, cold = _backend(tmp_path / "warm", True), _backend(tmp_path / "cold", False)
    try:
        assert warm.warm_start and not cold.warm_start
        w, c = _facts(warm), _facts(cold)
    finally:
        warm.shutdown()
        cold.shutdown()
    assert w["ppid"] != os.getpid() and c["ppid"] == os.getpid()  # the zygote's child, not ours
    for facts in (w, c):
        assert facts["sid"] == facts["pid"] == facts["pgid"]  # its own session: cancel kills its tree
        assert facts["stdin"] == "/dev/null" and facts["var"] == "x" and facts["name"] == "__main__"
        assert facts["threads"] == 1
    assert w["cwd"] == c["cwd"] == os.getcwd()
    assert [Path(a).name for a in w["argv"]] == [Path(a).name for a in c["argv"]] == ["facts", "out"]


def test_exit_statuses_are_those_of_a_process(tmp_path: Path) -> None:
    backend = _backend(tmp_path / "run", True)
    try:
        for code in (0, 3, 7):
            spec = spec_for(backend, f"t000{code}", "exit")
            spec = type(spec)(**{**spec.__dict__, "argv": (*spec.argv, str(code))})
            assert wait_done(backend.launch(spec, backend.slots()[0])) == code
        spec = spec_for(backend, "t0010", "sleep")
        handle = backend.launch(spec, backend.slots()[0])
        wait_for(spec.trial_dir / "out" / "started")
        os.kill(handle.pid, signal.SIGKILL)
        assert wait_done(handle) == -signal.SIGKILL
        assert "SIGKILL" in handle.describe_failure()
    finally:
        backend.shutdown()


def test_a_dead_zygote_loses_no_status_and_later_attempts_start_cold(tmp_path: Path) -> None:
    backend = _backend(tmp_path / "run", True)
    try:
        assert backend._zygote is not None
        spec = spec_for(backend, "t0000", "sleep")
        running = backend.launch(spec, backend.slots()[0])
        wait_for(spec.trial_dir / "out" / "started")
        os.kill(backend._zygote.pid, signal.SIGKILL)
        os.kill(running.pid, signal.SIGKILL)  # its status dies with the zygote
        assert wait_done(running) == ZYGOTE_LOST_RC
        later = spec_for(backend, "t0001", "ok")
        handle = backend.launch(later, backend.slots()[1])
        assert wait_done(handle) == 0 and (later.trial_dir / "out" / "done").exists()
        assert backend._zygote is None and "exited with status -9" in backend.zygote_note
    finally:
        backend.shutdown()


def test_the_zygote_leaves_when_its_controller_does(tmp_path: Path) -> None:
    zygote = Zygote(["tests.backends.fake_trial"], log=tmp_path / "zygote.log")
    assert zygote.wait_ready()
    zygote._in.close()  # what the kernel does for a controller that died
    deadline = time.monotonic() + 10
    while zygote._proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert zygote._proc.poll() == 0


def test_a_module_that_cannot_be_preloaded_is_imported_by_the_attempt(tmp_path: Path) -> None:
    zygote = Zygote(["no_such_module_here"], log=tmp_path / "zygote.log")
    try:
        assert zygote.wait_ready() and zygote.preloaded == []
        assert "no_such_module_here" in zygote.failure
        out = tmp_path / "out"
        child = zygote.spawn((*FAKE, "ok", str(out)), {**os.environ, "PYTHONPATH": os.getcwd()}, os.getcwd(),
                             tmp_path / "stdout", tmp_path / "stderr")
        assert child.wait(timeout=60) == 0 and (out / "done").exists()
        with pytest.raises(ZygoteError, match="python -m MODULE"):
            zygote.spawn(("/bin/true",), dict(os.environ), os.getcwd(), tmp_path / "o", tmp_path / "e")
    finally:
        zygote.close()


@pytest.mark.parametrize("warm", [True, False])
def test_the_end_of_an_attempt_wakes_the_controller(tmp_path: Path, warm: bool) -> None:
    """The backend's wake-up descriptors (the zygote's pipe, a cold attempt's pidfd) turn readable
    when an attempt ends, so that the controller learns of it at once, not at its next look."""
    backend = _backend(tmp_path / "run", warm)
    try:
        spec = spec_for(backend, "t0000", "sleep")
        handle = backend.launch(spec, backend.slots()[0])
        wait_for(spec.trial_dir / "out" / "started")
        fds = backend._wake_fds()
        assert len(fds) == 1
        assert select.select(fds, [], [], 0)[0] == []  # nothing to say while it runs
        os.kill(handle.pid, signal.SIGKILL)
        assert select.select(fds, [], [], 30)[0] == fds
        assert handle in backend.wait_changed(30)
        assert handle.poll() == -signal.SIGKILL
        assert backend._wake_fds() == []  # nothing running: nothing to wait on
    finally:
        backend.shutdown()
