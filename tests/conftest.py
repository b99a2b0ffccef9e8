"""Shared test fixtures. Services (PostgreSQL, Redis, Celery, SLURM, Chromium) are used for real:
with AIPERF_REQUIRE_SERVICES=1 (set by .ci/run) a missing one fails the test instead of skipping it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REFERENCE_DIR = REPO.parent / "shared" / "reference"


def services_required() -> bool:
    return os.environ.get("AIPERF_REQUIRE_SERVICES") == "1"


def need_service(available: bool, reason: str) -> None:
    """Skip (locally) or fail (in CI) a test whose service is missing."""
    if available:
        return
    if services_required():
        pytest.fail(f"required service missing under AIPERF_REQUIRE_SERVICES=1: {reason}")
    pytest.skip(reason)


@pytest.fixture
def reference_resnet50() -> Path:
    path = REFERENCE_DIR / "resnet50.json"
    if not path.exists():
        pytest.skip(f"reference graph not found at {path}")
    return path
