"""The runner's container (runner/container/Dockerfile) builds from a wheelhouse and runs the smoke preset.

The image is built FROM the local Debian base of scripts/docker-base.sh (no registry is reachable
here), from the session's [train] wheelhouse with torch's CPU build (conftest.train_wheelhouse),
with no index. The smoke run is offline, with no network at all (`--network none`), and verifies
both inside the container and with this checkout's verifier. Needs Docker (skipped without it,
failed under AIPERF_REQUIRE_SERVICES=1). On two cores shared with other jobs (load 9-12): the
build 5.3 min (most of it pip unpacking and compiling torch, then copying the venv out of the first
stage), the 30-s run about 35 s, removing the image 2.5-4.3 min. AIPERF_RUNNER_IMAGE names an image
built earlier (e.g. by `make runner-image` in the same CI run) to use instead of building one.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiperf_runner.run.state import RunState
from aiperf_runner.spec.verify import verify

from tests.helpers import REPO, need_service
from tests.runner.conftest import CPU_TORCH, SHORT_RUN_CHECKS, failed_checks

TAG = "aiperf-runner:test"
BASE = "aiperf-base:bookworm"
INSTALL_STAGE = "label=aiperf.stage=runner-install"  # the untagged first stage the build leaves


def docker(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *map(str, args)], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def docker_up() -> Iterator[None]:
    """dockerd and the base image (scripts/docker-base.sh start); stopped again only if started here."""
    try:
        was_up = docker("info", timeout=30).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        was_up = False
    start = subprocess.run(["bash", "scripts/docker-base.sh", "start"], capture_output=True, text=True,
                           cwd=REPO, timeout=900)
    need_service(start.returncode == 0, f"no Docker: {(start.stderr or start.stdout)[-500:]}")
    yield
    if not was_up:
        subprocess.run(["bash", "scripts/docker-base.sh", "stop"], cwd=REPO, timeout=60)


@pytest.fixture(scope="session")
def runner_image(docker_up: None, train_wheelhouse: Path) -> Iterator[str]:
    if os.environ.get("AIPERF_RUNNER_IMAGE"):
        yield os.environ["AIPERF_RUNNER_IMAGE"]
        return
    build = docker("build", "-q", "-f", REPO / "runner/container/Dockerfile", "--build-arg", f"BASE_IMAGE={BASE}",
                   "-t", TAG, train_wheelhouse, timeout=1500)
    try:
        assert build.returncode == 0, build.stderr[-3000:]
        yield TAG
    finally:
        docker("image", "rm", "-f", TAG)
        docker("image", "prune", "-f", "--filter", INSTALL_STAGE)


@pytest.mark.slow
def test_the_runner_container_builds_and_runs_the_smoke_preset(runner_image: str, tmp_path: Path) -> None:
    # Where a site binds its NCCL network plugin is searched first (docs/running.md, "The site's NCCL").
    env = docker("run", "--rm", runner_image, "printenv", "LD_LIBRARY_PATH")
    assert env.stdout.split(":")[0].strip() == "/opt/nccl-plugins", env.stdout + env.stderr
    runs = tmp_path / "runs"
    runs.mkdir()
    # As this user (files the host can remove), with no network: an offline run needs none.
    box = ["run", "--rm", "--network", "none", "--user", f"{os.getuid()}:{os.getgid()}", "-e", "HOME=/tmp",
           "-v", f"{runs}:/runs", runner_image]
    out = docker(*box, "aiperf-runner", "run", "--preset", "smoke", "--slots", "2", "--duration", "30s",
                 "--offline", "--out", "/runs/smoke", "--progress", "plain")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "run finished (duration)" in out.stdout
    inside = docker(*box, "aiperf-runner", "verify", "/runs/smoke")
    assert inside.returncode == 0 and "integrity OK" in inside.stdout, (inside.stdout + inside.stderr)[-3000:]

    run_dir = runs / "smoke"
    state = RunState.load(run_dir)
    assert state.count("finished") >= 1, out.stdout[-3000:]
    report = verify(run_dir)  # this checkout's verifier agrees with the container's
    assert report["integrity_ok"] is True
    assert failed_checks(report) <= SHORT_RUN_CHECKS, [c for c in report["checks"] if not c["passed"]]
    # The trials ran on the image's torch (the CPU build of the wheelhouse), not this machine's.
    torch = json.loads((run_dir / "run.json").read_text())["system"]["torch"]
    assert f"torch=={torch}" in {pin.split("+")[0] for pin in CPU_TORCH}, torch
