"""Helpers shared by tests: services are used for real, and required under CI."""

from __future__ import annotations

import os
from pathlib import Path

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
