"""A zygote started elsewhere (the slurm-steps backend's warm starts: `command_prefix`, its srun): its children
are signalled through it, never by pid from here; a request can keep the zygote's environment and take a share
of its cores; and when its controller is gone it kills what it still runs. `env` stands in for srun here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiperf_runner.backends.zygote import ZYGOTE_LOST_RC, Zygote
from aiperf_runner.util.cpubind import format_cpulist

from tests.backends.test_conformance import wait_for

FAKE = (sys.executable, "-m", "tests.backends.fake_trial")


@pytest.fixture
def zygote(tmp_path: Path):
    env = {**os.environ, "FAKE_INHERITED": "from the step", "PYTHONPATH": os.getcwd()}
    z = Zygote(["tests.backends.fake_trial"], log=tmp_path / "zygote.log", command_prefix=["env"], env=env)
    assert z.wait_ready() and z.remote
    yield z
    z.close()


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat[stat.rfind(")") + 2:].split()[0] == "Z":
            return True
        time.sleep(0.05)
    return False


def test_a_request_keeps_the_zygotes_environment_and_takes_its_share_of_cores(zygote, tmp_path: Path) -> None:
    out = tmp_path / "out"
    child = zygote.spawn((*FAKE, "facts", str(out)), {"FAKE_TRIAL_VAR": "mine"}, os.getcwd(), tmp_path / "o",
                         tmp_path / "e", inherit_env=True, cpu_share=(1, 2))
    assert child.wait(timeout=60) == 0, (tmp_path / "e").read_text()
    facts = json.loads((out / "facts.json").read_text())
    assert facts["inherited"] == "from the step" and facts["var"] == "mine"
    if len(os.sched_getaffinity(0)) > 1:  # one of two shares of this machine's cores, never all of them
        assert facts["cpu_set"] and set(facts["affinity"]) < os.sched_getaffinity(0)
        assert facts["cpu_set"] == format_cpulist(facts["affinity"])  # bound, as srun would bind a step
    assert (tmp_path / "e").read_text() == ""  # nothing on stderr (runpy's warning about the preloaded module)
    plain = tmp_path / "plain"
    child = zygote.spawn((*FAKE, "facts", str(plain)), {"PYTHONPATH": os.getcwd()}, os.getcwd(), tmp_path / "o",
                         tmp_path / "e")
    assert child.wait(timeout=60) == 0
    facts = json.loads((plain / "facts.json").read_text())
    assert facts["inherited"] is None and facts["cpu_set"] is None  # the request's environment only
    assert set(facts["affinity"]) == os.sched_getaffinity(0)


def test_a_child_is_signalled_through_its_zygote_with_its_whole_tree(zygote, tmp_path: Path) -> None:
    out = tmp_path / "out"
    child = zygote.spawn((*FAKE, "sleep", str(out)), {}, os.getcwd(), tmp_path / "o", tmp_path / "e",
                         inherit_env=True)
    wait_for(out / "child.pid")
    grandchild = int((out / "child.pid").read_text())
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM
    assert _gone(grandchild)  # its process group: what the attempt started goes too


def test_the_zygote_signals_only_its_own_children(zygote, tmp_path: Path) -> None:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert zygote.signal(bystander.pid, signal.SIGKILL)
        out = tmp_path / "out"
        child = zygote.spawn((*FAKE, "ok", str(out)), {}, os.getcwd(), tmp_path / "o", tmp_path / "e",
                             inherit_env=True)
        assert child.wait(timeout=60) == 0  # the request after it was read and answered
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_remote_zygote_kills_its_children_when_its_controller_is_gone(zygote, tmp_path: Path) -> None:
    out = tmp_path / "out"
    child = zygote.spawn((*FAKE, "sleep", str(out)), {}, os.getcwd(), tmp_path / "o", tmp_path / "e",
                         inherit_env=True)
    wait_for(out / "pid")
    pid = int((out / "pid").read_text())
    zygote._in.close()  # what the kernel does for a controller that died
    assert _gone(pid) and _gone(int((out / "child.pid").read_text()))
    zygote._proc.wait(timeout=10)
    # Its status went with it: reported lost at once, without looking for the pid here.
    assert child.wait(timeout=10) in (-signal.SIGKILL, ZYGOTE_LOST_RC)
