"""What every backend must do: run a command on a slot, report its exit status, cancel it without
leaving anything behind, shut down cleanly. Parametrised over `BACKEND_CASES` (conftest.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiperf_runner.backends.base import Backend, LaunchSpec, TrialHandle

from tests.helpers import REPO

WAIT_S = 120.0  # generous: a queueing backend (SLURM) may take a while to start a job


@pytest.fixture
def backend(backend_case, tmp_path: Path) -> Iterator[Backend]:
    _, case = backend_case
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    b = case.make(run_dir, 2)
    yield b
    b.shutdown()


def spec_for(backend: Backend, trial_id: str, mode: str, env: dict[str, str] | None = None) -> LaunchSpec:
    trial_dir = backend.run_dir / "trials" / trial_id
    trial_dir.mkdir(parents=True, exist_ok=True)
    return LaunchSpec(
        trial_id=trial_id, attempt=1,
        argv=(sys.executable, "-m", "tests.backends.fake_trial", mode, str(trial_dir / "out")),
        trial_dir=trial_dir, stdout=trial_dir / "stdout.log", stderr=trial_dir / "stderr.log",
        env={"PYTHONPATH": str(REPO), **(env or {})},
    )


def wait_done(handle: TrialHandle, timeout: float = WAIT_S) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc = handle.poll()
        if rc is not None:
            return rc
        time.sleep(0.05)
    raise AssertionError(f"attempt {handle.spec.trial_id} still running after {timeout} s")


def wait_for(path: Path, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.05)


def process_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"  # a zombie waiting for init is no running process


def test_slots_are_sane(backend: Backend) -> None:
    slots = backend.slots()
    assert len(slots) == 2
    assert sorted(s.index for s in slots) == [0, 1]
    for s in slots:
        assert s.nodes and all(isinstance(n, str) and n for n in s.nodes)
        assert s.world_size >= 1
        assert s.device_type in ("cpu", "cuda")
    assert isinstance(backend.system_facts(), dict)


def test_successful_command(backend: Backend, backend_case) -> None:
    _, case = backend_case
    spec = spec_for(backend, "t0000", "ok")
    handle = backend.launch(spec, backend.slots()[0])
    assert handle.slot == backend.slots()[0] and handle.spec == spec
    assert wait_done(handle) == 0
    assert (spec.trial_dir / "out" / "done").read_text() == "done\n"
    assert handle.poll() == 0  # stays finished
    if case.captures_output:
        assert "fake trial ok starting" in spec.stdout.read_text()
    handle.cancel()  # cancelling a finished attempt changes nothing
    assert handle.poll() == 0


def test_failing_command(backend: Backend, backend_case) -> None:
    _, case = backend_case
    spec = spec_for(backend, "t0001", "fail")
    handle = backend.launch(spec, backend.slots()[1])
    rc = wait_done(handle)
    assert rc != 0
    assert isinstance(handle.describe_failure(), str)
    if case.captures_output:
        assert "failing on purpose" in spec.stderr.read_text()


def test_environment_reaches_the_command(backend: Backend, backend_case) -> None:
    _, case = backend_case
    if not case.applies_env:
        pytest.skip("this backend runs attempts in the controller's own environment")
    spec = spec_for(backend, "t0002", "env", env={"FAKE_TRIAL_VAR": "hello"})
    assert wait_done(backend.launch(spec, backend.slots()[0])) == 0
    assert (spec.trial_dir / "out" / "env").read_text() == "hello"


def test_cancel_stops_a_running_command_and_leaves_nothing(backend: Backend, backend_case) -> None:
    _, case = backend_case
    spec = spec_for(backend, "t0003", "sleep")
    handle = backend.launch(spec, backend.slots()[0])
    out = spec.trial_dir / "out"
    wait_for(out / "started")
    assert handle.poll() is None
    handle.cancel()
    rc = wait_done(handle, timeout=30)
    assert rc != 0
    handle.cancel()  # idempotent
    assert handle.poll() == rc
    if case.processes:
        pids = [int((out / name).read_text()) for name in ("pid", "child.pid")]
        deadline = time.monotonic() + 30
        while not all(process_gone(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(process_gone(p) for p in pids), f"processes left behind: {pids}"


def test_slots_run_at_once_and_shutdown_cancels_all(backend: Backend, backend_case) -> None:
    _, case = backend_case
    specs = [spec_for(backend, f"t00{10 + i}", "sleep") for i in range(2)]
    handles = [backend.launch(s, slot) for s, slot in zip(specs, backend.slots(), strict=True)]
    for s in specs:
        wait_for(s.trial_dir / "out" / "started")
    assert all(h.poll() is None for h in handles)  # both slots busy at the same time
    backend.shutdown()
    for h in handles:
        assert wait_done(h, timeout=30) != 0
    if case.processes:
        pids = [int((s.trial_dir / "out" / n).read_text()) for s in specs for n in ("pid", "child.pid")]
        deadline = time.monotonic() + 30
        while not all(process_gone(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(process_gone(p) for p in pids), f"processes left behind: {pids}"
