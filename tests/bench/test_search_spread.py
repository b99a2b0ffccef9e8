"""bench/search_spread.py: a replay is repeatable for its run number, stays within the bound it is
given, and the run number changes the path (a few seconds: 40 simulated seconds per replay)."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from tests.helpers import REPO


def _script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    return importlib.import_module("search_spread")


def test_a_replay_is_repeatable_and_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script(monkeypatch)
    first = script.replay(2.0, 0, duration_s=40.0, slots=2, epoch_s=1.33)
    assert script.replay(2.0, 0, duration_s=40.0, slots=2, epoch_s=1.33) == first
    assert 1.0 < first <= 2.0  # it grows from the seed, never past the bound
    others = {script.replay(2.0, k, duration_s=40.0, slots=2, epoch_s=1.33) for k in (1, 2, 3)}
    assert others != {first}  # timings and results differ between runs, and so does the path


def test_the_accuracy_model_is_quantised_and_rises_with_size(monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    script = _script(monkeypatch)
    small = [script.accuracy(1.0, 4, random.Random(k)) for k in range(200)]
    large = [script.accuracy(3.0, 4, random.Random(k)) for k in range(200)]
    assert all(abs(a * 2000 - round(a * 2000)) < 1e-6 for a in small)
    assert sum(large) / 200 > sum(small) / 200
    assert script.accuracy(1.0, 1, random.Random(0)) < script.accuracy(1.0, 4, random.Random(0))
