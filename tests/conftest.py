"""Fixtures shared by every test directory."""

from __future__ import annotations

from pathlib import Path

import pytest

# The official seed in the original AIPerf format (a copy of the reference benchmark's resnet50.json), so
# that the test vectors run in any checkout; tests/flops/test_v1compat.py checks it is the same file.
REFERENCE_COPY = Path(__file__).parent / "data" / "reference_resnet50.json"


@pytest.fixture
def reference_resnet50() -> Path:
    return REFERENCE_COPY
