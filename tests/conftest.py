"""Fixtures shared by every test directory."""

from __future__ import annotations

from pathlib import Path

import pytest

# A copy of ../shared/reference/resnet50.json (the official seed in the original AIPerf format), so
# that the test vectors run in any checkout; tests/flops/test_v1compat.py checks it is the same file.
REFERENCE_COPY = Path(__file__).parent / "data" / "reference_resnet50.json"


@pytest.fixture
def reference_resnet50() -> Path:
    return REFERENCE_COPY
