"""Helpers for the controller tests: a fast fake trial program instead of the real one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.controller import Controller, RunConfig

from tests.helpers import REPO

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
