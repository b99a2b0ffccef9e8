"""The "a backend" recipe's backend (tests/backends/recipe_backend.py) takes its one option typed and
refuses a misspelt one, as every backend does; the conformance suite runs it as the case "recipe"."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiperf_runner.backends.options import BackendOptionError
from aiperf_runner.spec.errors import AiperfError

from tests.backends.recipe_backend import NiceBackend


def test_its_option_is_typed(tmp_path: Path) -> None:
    backend = NiceBackend(tmp_path, slots="3", niceness="2")  # as --backend-opt gives them
    assert backend.options.niceness == 2 and len(backend.slots()) == 3


def test_a_misspelt_option_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(BackendOptionError) as err:
        NiceBackend(tmp_path, nicenes=1)
    assert isinstance(err.value, AiperfError)
    assert "'nicenes'" in str(err.value) and "niceness" in str(err.value)


def test_its_bounds_are_checked(tmp_path: Path) -> None:
    with pytest.raises(BackendOptionError, match="niceness"):
        NiceBackend(tmp_path, niceness=-1)
