"""A controller that cannot reach the service is witnessed through `aiperf-runner relay`.

The controller runs in a network namespace whose only route is a veth link to this host's end
(10.231.7.1), where the relay listens; the service (gunicorn on 127.0.0.1) is out of its reach, as
the list is from a compute node without internet. Mid-run the relay is killed with SIGKILL and
started again: the run's heartbeats resume through it, and every receipt the service issued ends up
in the log (the controller fetches the ones it missed). The run then verifies with every witness
check passed, submitted in chunks through the relay as well. Needs root and iproute2; about a minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, need_service
from tests.service.stack import BIN, Stack, assert_witnessed, free_port, verified_checks, witnessed_stack

pytestmark = [pytest.mark.services, pytest.mark.slow]

NETNS = "aiperf-relay-test"
RELAY_IP, NODE_IP = "10.231.7.1", "10.231.7.2"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def netns() -> Iterator[str]:
    """A network namespace linked to this host by one veth pair, with no other route."""
    need_service(os.geteuid() == 0 and shutil.which("ip") is not None,
                 "a network namespace needs root and iproute2 (apt-get install iproute2)")
    ip("netns", "del", NETNS, check=False)
    ip("link", "del", "aiperf-rl0", check=False)
    try:
        ip("netns", "add", NETNS)
        ip("link", "add", "aiperf-rl0", "type", "veth", "peer", "name", "aiperf-rl1")
        ip("link", "set", "aiperf-rl1", "netns", NETNS)
        ip("addr", "add", f"{RELAY_IP}/30", "dev", "aiperf-rl0")
        ip("link", "set", "aiperf-rl0", "up")
        for args in (("addr", "add", f"{NODE_IP}/30", "dev", "aiperf-rl1"), ("link", "set", "aiperf-rl1", "up"),
                     ("link", "set", "lo", "up")):
            ip("netns", "exec", NETNS, "ip", *args)
    except subprocess.CalledProcessError as exc:
        need_service(False, f"could not make a network namespace: {exc.stderr.strip()}")
    try:
        yield NETNS
    finally:
        ip("link", "del", "aiperf-rl0", check=False)
        ip("netns", "del", NETNS, check=False)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with witnessed_stack(tmp_path_factory.mktemp("relay"), AIPERF_HEARTBEAT_INTERVAL_S="5") as s:
        yield s


def reachable(url: str) -> bool:
    """Whether an HTTP GET of `url` from inside the namespace gets any answer."""
    code = f"import httpx, sys\ntry:\n    httpx.get({url!r}, timeout=3)\nexcept httpx.HTTPError:\n    sys.exit(1)"
    return subprocess.run(["ip", "netns", "exec", NETNS, sys.executable, "-c", code], capture_output=True).returncode == 0


def start_relay(stack: Stack, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([str(BIN / "aiperf-runner"), "relay", "--listen", f"{RELAY_IP}:{port}",
                             "--server", stack.url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while not reachable(f"http://{RELAY_IP}:{port}/api/v1/"):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.3)
    return proc


def witness_lines(run_dir: Path) -> list[dict]:
    try:
        lines = (run_dir / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    return [e for e in map(json.loads, lines) if e["type"] == "witness"]


def test_a_controller_without_a_route_to_the_service_is_witnessed_through_the_relay(netns: str, stack: Stack,
                                                                                    tmp_path: Path) -> None:
    _, config = stack.new_site("Dark Nodes Centre", "DE")
    system = json.loads(stack.runner("system", "add", "--name", "dark", "--accelerator-model", "cpu",
                                     "--accelerators-per-node", "0", "--nodes", "1", "--facts-from", "here",
                                     "--json", config=config).stdout)
    port = free_port()
    relay_url = f"http://{RELAY_IP}:{port}"
    relay = start_relay(stack, port)
    assert not reachable(f"{stack.url}/api/v1/"), "the namespace reaches the service directly"

    run_dir = tmp_path / "run"
    env = {**os.environ, "AIPERF_CONFIG_DIR": str(config), "FAKE_EPOCH_S": "0.5",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    controller = subprocess.Popen(["ip", "netns", "exec", netns, str(BIN / "aiperf-runner"), "run", "--preset", "smoke",
                                   "--slots", "1", "--duration", "40s", "--system", str(system["id"]),
                                   "--server", relay_url, "--out", str(run_dir), "--progress", "plain",
                                   "--trial-module", "tests.runner.fake_trial"],
                                  env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(witness_lines(run_dir)) < 3:
            assert controller.poll() is None and time.monotonic() < deadline, controller.communicate()[0][-3000:]
            time.sleep(0.5)
        relay.kill()  # SIGKILL mid-run: a heartbeat or two find nothing listening
        relay.communicate()
        time.sleep(7)
        relay = start_relay(stack, port)
        out, _ = controller.communicate(timeout=180)
        check_run_and_submit(stack, netns, relay_url, run_dir, controller, out, env)
    finally:
        for proc in (controller, relay):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def check_run_and_submit(stack: Stack, netns: str, relay_url: str, run_dir: Path, controller: subprocess.Popen[str],
                         out: str, env: dict[str, str]) -> None:
    assert controller.returncode == 0 and "run finished (duration)" in out, out[-3000:]

    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    issued = {seq for (seq,) in stack.sql(
        "SELECT h.heartbeat_seq FROM leaderboard_heartbeat h JOIN leaderboard_runattempt a ON h.attempt_id = a.id "
        "WHERE a.run_id = %s", run_id)}
    logged = {e["heartbeat_seq"] for e in witness_lines(run_dir)}
    assert issued and issued == logged, (sorted(issued), sorted(logged))  # no receipt lost
    beats = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    beats = [e for e in beats if e["type"] == "heartbeat"]
    assert len(beats) > len(logged), "no heartbeat went out while the relay was down"
    print(f"\nthrough the relay: {len(beats)} heartbeats, {len(logged)} receipts (the rest sent while it was down)")

    # Submitted from the namespace too, in chunks: each chunk's address comes back as the relay's.
    submitted = subprocess.run(["ip", "netns", "exec", netns, str(BIN / "aiperf-runner"), "submit", str(run_dir),
                                "--server", relay_url, "--chunk-size", "0.01", "--no-wait", "--json"],
                               env=env, cwd=str(REPO), capture_output=True, text=True, timeout=300)
    assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-2000:]
    assert run_dir.with_name("run.tar.gz").stat().st_size > 3 * (0.01 * 2**20), "the bundle went in one piece"
    sub = json.loads(submitted.stdout)
    assert_witnessed(verified_checks(stack, sub))
