"""Fixtures shared by every test directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REFERENCE_DIR


@pytest.fixture
def reference_resnet50() -> Path:
    path = REFERENCE_DIR / "resnet50.json"
    if not path.exists():
        pytest.skip(f"reference graph not found at {path}")
    return path
