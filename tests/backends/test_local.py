"""What the local backend does beyond the conformance suite: device split, pid files, orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiperf_runner.backends.local import LocalBackend, describe_returncode

from tests.backends.test_conformance import process_gone, spec_for, wait_done, wait_for


def test_cpu_slots_share_the_cores(tmp_path: Path) -> None:
    b = LocalBackend(tmp_path, slots=2, devices_per_slot=1, device_type="cpu")
    env = b.slot_env(b.slots()[1])
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert int(env["OMP_NUM_THREADS"]) == max(1, b.cores // 2)
    assert [s.world_size for s in b.slots()] == [1, 1]


def test_cuda_slots_get_disjoint_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("aiperf_runner.backends.local.cuda_device_count", lambda: 4)
    b = LocalBackend(tmp_path, slots=2, devices_per_slot=2)
    assert [b.slot_env(s)["CUDA_VISIBLE_DEVICES"] for s in b.slots()] == ["0,1", "2,3"]
    assert all(s.device_type == "cuda" and s.world_size == 2 for s in b.slots())
    with pytest.raises(ValueError, match="need 6 GPUs"):
        LocalBackend(tmp_path, slots=3, devices_per_slot=2)


def test_pid_file_lives_while_the_attempt_runs(tmp_path: Path) -> None:
    b = LocalBackend(tmp_path, slots=1, device_type="cpu")
    spec = spec_for(b, "t0000", "sleep")
    handle = b.launch(spec, b.slots()[0])
    record = json.loads((spec.trial_dir / "pid").read_text())
    assert record["pid"] == handle.pid and record["attempt"] == 1
    handle.cancel()
    assert wait_done(handle) != 0 and handle.describe_failure() == "cancelled"
    assert not (spec.trial_dir / "pid").exists()


def test_reap_orphan_kills_what_a_dead_controller_left(tmp_path: Path) -> None:
    # A "controller" that launches a trial and is then SIGKILLed, leaving the trial running.
    code = (
        "import sys; from pathlib import Path\n"
        "from aiperf_runner.backends.local import LocalBackend\n"
        "from tests.backends.test_conformance import spec_for\n"
        f"b = LocalBackend(Path({str(tmp_path)!r}), slots=1, device_type='cpu')\n"
        "b.launch(spec_for(b, 't0000', 'sleep'), b.slots()[0])\n"
        "import os, signal, time; time.sleep(60)\n"
    )
    root = Path(__file__).resolve().parents[2]
    controller = subprocess.Popen([sys.executable, "-c", code], cwd=root,
                                  env={**os.environ, "PYTHONPATH": str(root)})
    out = tmp_path / "trials" / "t0000" / "out"
    wait_for(out / "started")
    controller.send_signal(signal.SIGKILL)
    controller.wait()
    pids = [int((out / n).read_text()) for n in ("pid", "child.pid")]
    assert not any(process_gone(p) for p in pids)  # the orphans are alive

    fresh = LocalBackend(tmp_path, slots=1, device_type="cpu")
    note = fresh.reap_orphan(tmp_path / "trials" / "t0000")
    assert note and "killed" in note
    deadline = time.monotonic() + 10
    while not all(process_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(process_gone(p) for p in pids)
    assert not (tmp_path / "trials" / "t0000" / "pid").exists()
    assert fresh.reap_orphan(tmp_path / "trials" / "t0000") is None  # nothing left to do


def test_reap_orphan_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        trial_dir = tmp_path / "t0000"
        trial_dir.mkdir()
        (trial_dir / "pid").write_text(json.dumps({"pid": other.pid, "pgid": other.pid, "start_time": 1}))
        assert LocalBackend(tmp_path, slots=1, device_type="cpu").reap_orphan(trial_dir) is None
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_describe_returncode() -> None:
    assert describe_returncode(2) == "exit status 2"
    assert "SIGKILL" in describe_returncode(-9) and "memory" in describe_returncode(-9)


def test_cpu_slots_get_their_own_cores(tmp_path: Path) -> None:
    from aiperf_runner.util.cpubind import CPU_SET_ENV, parse_cpulist

    allowed = sorted(os.sched_getaffinity(0))
    b = LocalBackend(tmp_path, slots=2, devices_per_slot=1, device_type="cpu")
    sets = [parse_cpulist(b.slot_env(s)[CPU_SET_ENV]) for s in b.slots()]
    if len(allowed) >= 2:
        assert not set(sets[0]) & set(sets[1]) and sorted(sets[0] + sets[1]) == allowed
    one = LocalBackend(tmp_path, slots=1, device_type="cpu")
    assert CPU_SET_ENV not in one.slot_env(one.slots()[0])  # one slot: the trial splits every core itself
