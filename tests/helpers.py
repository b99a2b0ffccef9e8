"""Helpers shared by tests: services are used for real, and required under CI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
REFERENCE_DIR = REPO.parent / "shared" / "reference"


def services_required() -> bool:
    return os.environ.get("AIPERF_REQUIRE_SERVICES") == "1"


def need_service(available: bool, reason: str) -> None:
    """Skip (locally) or fail (with AIPERF_REQUIRE_SERVICES=1, as .ci/run sets) when a service is missing."""
    if available:
        return
    if services_required():
        pytest.fail(f"required service missing under AIPERF_REQUIRE_SERVICES=1: {reason}")
    pytest.skip(reason)


def run_events(run_dir: Path) -> list[dict[str, Any]]:
    """The events a run has logged so far (a line still being written is left out)."""
    try:
        text = (run_dir / "events.jsonl").read_text()
    except OSError:
        return []
    events = []
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return events


def stop_runs_when(runs: Sequence[tuple[subprocess.Popen, Path]], ready: Callable[[list[dict[str, Any]]], bool],
                   timeout: float) -> None:
    """Send each `aiperf-runner run` process SIGTERM once its run directory's log satisfies `ready` (the runner then
    stops in order: running trials cancelled, the log closed, its end witnessed where the run is), and return when
    every one has ended. A test on a busy machine ends its run on what it needs, not after a fixed duration that a
    slow machine may spend without it; the runs' own --duration bounds them, `timeout` bounds the wait."""
    deadline = time.monotonic() + timeout
    stopped: set[int] = set()
    while any(proc.poll() is None for proc, _ in runs):
        for i, (proc, run_dir) in enumerate(runs):
            if i not in stopped and proc.poll() is None and ready(run_events(run_dir)):
                proc.send_signal(signal.SIGTERM)
                stopped.add(i)
        if time.monotonic() > deadline:
            for proc, _ in runs:
                proc.kill()
            pytest.fail(f"runs still going after {timeout:.0f} s: {[str(run_dir) for _, run_dir in runs]}")
        time.sleep(1)
