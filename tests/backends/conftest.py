"""The backends the conformance suite runs against.

To put a backend through the suite, add one entry to BACKEND_CASES: a `BackendCase` whose `make`
builds the backend for a run directory and a number of slots (call `pytest.skip` inside it when the
backend cannot run here, e.g. no SLURM daemons). The flags say what the suite may check.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiperf_runner.backends.base import Backend, load_backend


@dataclass(frozen=True)
class BackendCase:
    make: Callable[[Path, int], Backend]
    processes: bool = True        # attempts are OS processes (pids can be checked after cancel)
    captures_output: bool = True  # the attempt's stdout/stderr land in the spec's files
    applies_env: bool = True      # LaunchSpec.env reaches the attempt


def _make_local(run_dir: Path, slots: int) -> Backend:
    return load_backend("local")(run_dir, slots=slots, devices_per_slot=1, device_type="cpu")


def _make_local_warm(run_dir: Path, slots: int) -> Backend:
    """Attempts forked by the warm-start zygote (backends/zygote.py), as runs on CPU have them."""
    backend = load_backend("local")(run_dir, slots=slots, devices_per_slot=1, device_type="cpu")
    backend.prepare((sys.executable, "-m", "tests.backends.fake_trial"))
    assert backend.warm_start, backend.zygote_note
    return backend


def _make_inprocess(run_dir: Path, slots: int) -> Backend:
    return load_backend("inprocess")(run_dir, slots=slots)


def _make_sim(run_dir: Path, slots: int) -> Backend:
    return load_backend("sim")(run_dir, slots=slots)


def _make_recipe(run_dir: Path, slots: int) -> Backend:
    """The backend of the "a backend" recipe (docs/internals.md, "Extending"), not installed: built
    directly, as its entry point would load it."""
    from tests.backends.recipe_backend import NiceBackend

    return NiceBackend(run_dir, slots=slots, niceness=1)


BACKEND_CASES: dict[str, BackendCase] = {
    "local": BackendCase(_make_local),
    "local-warm": BackendCase(_make_local_warm),
    "inprocess": BackendCase(_make_inprocess, processes=False, captures_output=False, applies_env=False),
    "sim": BackendCase(_make_sim, processes=False, captures_output=False, applies_env=False),
    "recipe": BackendCase(_make_recipe),
}


@pytest.fixture(params=sorted(BACKEND_CASES))
def backend_case(request: pytest.FixtureRequest) -> tuple[str, BackendCase]:
    return request.param, BACKEND_CASES[request.param]
