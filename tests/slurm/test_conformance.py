"""The backend conformance suite (tests/backends/test_conformance.py) against real SLURM daemons."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.backends.slurm_factory import SLURM_CASE
from tests.backends.test_conformance import (  # noqa: F401 - the suite's tests and its `backend` fixture
    backend,
    test_cancel_stops_a_running_command_and_leaves_nothing,
    test_environment_reaches_the_command,
    test_failing_command,
    test_slots_are_sane,
    test_slots_run_at_once_and_shutdown_cancels_all,
    test_successful_command,
)


@pytest.fixture
def backend_case(one_node: Path):
    return "slurm", SLURM_CASE
