"""Helpers for the controller tests: a fast fake trial program instead of the real one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.run.controller import Controller, RunConfig

from tests.helpers import REPO, need_service

FAKE_TRIAL = "tests.runner.fake_trial"

# Checks a local smoke run can never pass: it is neither the official preset nor an hour long, and
# verified offline without a registration its hardware is unregistered, without a service unwitnessed.
OPEN_DIVISION_CHECKS = {"validity.preset", "validity.duration", "system.registered", "witness.token",
                        "witness.coverage"}
# A run of seconds (or one with a controller kill in it): too short for a stable score.
SHORT_RUN_CHECKS = OPEN_DIVISION_CHECKS | {"stability.score_cv"}


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The fake trial importable by subprocesses, fast epochs, no failures unless a test asks."""
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("FAKE_EPOCH_S", "0.2")
    monkeypatch.delenv("FAKE_TRIAL_FAIL", raising=False)
    monkeypatch.delenv("FAKE_TRIAL_CRASH", raising=False)
    return monkeypatch


def config(**kw: Any) -> RunConfig:
    base: dict[str, Any] = {"preset": "smoke", "slots": 2, "duration_s": 5.0, "backend": "inprocess",
                            "trial_module": FAKE_TRIAL, "epoch_budgets": [1, 2, 3, 4]}
    base.update(kw)
    return RunConfig(**base)


def run_controller(run_dir: Path, **kw: Any) -> Controller:
    controller = Controller.create(config(**kw), run_dir)
    controller.run()
    return controller


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiperf_runner", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=timeout)


def failed_checks(report: dict[str, Any]) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["passed"]}


# ---- a wheelhouse with the [train] extra, shared by test_wheelhouse and test_container ----------

# torch's CPU build: PyPI's Linux torch brings about 2.7 GB of CUDA wheels (nvidia-*), whose image
# takes over ten minutes to build on two cores; the CPU build (download.pytorch.org/whl/cpu, on this
# project's CI machine among pip's find-links) is 180 MB. AIPERF_CPU_TORCH names other pins.
CPU_TORCH = os.environ.get("AIPERF_CPU_TORCH", "torch==2.13.0+cpu torchvision==0.28.0").split()
UNREACHABLE = ("Could not find a version", "NewConnectionError", "Network is unreachable",
               "Temporary failure in name resolution", "No matching distribution")


def sh(*argv: str | Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A command in the checkout, without PYTHONPATH: a fresh venv must see only what it installed."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_NO_INDEX")}
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**clean, **(env or {})})


def build_wheelhouse(out: Path, *, train: bool, env: dict[str, str] | None = None) -> Path:
    """`make wheelhouse [TRAIN=1]` into out/wheelhouse (skipped without a package index, failed under CI)."""
    wheels = out / "wheelhouse"
    build = sh("make", "-s", "wheelhouse", f"WHEELHOUSE={wheels}", f"PY={sys.executable}",
               *(["TRAIN=1"] if train else []), env=env, timeout=600)
    reachable = build.returncode == 0 or not any(s in build.stderr for s in UNREACHABLE)
    need_service(reachable, f"no package index to build the wheelhouse from: {build.stderr[-300:]}")
    assert build.returncode == 0, build.stderr[-3000:]
    assert [p.name for p in wheels.glob("aiperf_runner-*.whl")] and "--no-index" in build.stdout
    return wheels


@pytest.fixture(scope="session")
def train_wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make wheelhouse TRAIN=1` with torch's CPU build (CPU_TORCH), built once per session (~25 s)."""
    out = tmp_path_factory.mktemp("train-wheelhouse")
    pins = out / "cpu-torch.txt"  # beside the wheelhouse: the wheelhouse is an image's whole build context
    pins.write_text("\n".join(CPU_TORCH) + "\n")
    return build_wheelhouse(out, train=True, env={"PIP_CONSTRAINT": str(pins)})
