"""spec/spread.py: which measured spread a result is shown, by preset and run length."""

from __future__ import annotations

import pytest
from aiperf_runner.spec import spread
from aiperf_runner.spec.spread import Spread


def _entry(minutes: float, cv: float) -> Spread:
    return Spread("smoke", minutes * 60, 2, 5, cv, cv * 1.1, "a test machine", "2026-12-02")


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> tuple[Spread, ...]:
    table = (_entry(10, 0.02), _entry(2, 0.08), _entry(5, 0.04))
    monkeypatch.setattr(spread, "MEASURED", table)
    return table


def test_a_run_gets_the_longest_measurement_not_longer_than_itself(measured) -> None:
    assert spread.known_spread("smoke", 300).score_cv == 0.04
    assert spread.known_spread("smoke", 299).score_cv == 0.04  # within 5 %: a 5-minute run that ended early
    assert spread.known_spread("smoke", 7200).score_cv == 0.02
    assert spread.known_spread("smoke", 200).score_cv == 0.08


def test_shorter_than_any_measurement_or_unknown_length_gets_the_shortest(measured) -> None:
    assert spread.known_spread("smoke", 30).score_cv == 0.08
    assert spread.known_spread("smoke", None).score_cv == 0.08
    assert spread.known_spread("smoke", "5m").score_cv == 0.08


def test_an_unmeasured_preset_has_none(measured) -> None:
    assert spread.known_spread("imagenet", 3600) is None
    assert spread.known_spread(None, 3600) is None


def test_the_description_names_what_was_measured(measured) -> None:
    text = spread.known_spread("smoke", 600).describe()
    assert text.startswith("CV 2.0% of the score, 2.2% of the regulated score: 5 smoke runs of 10 min with 2 slots")
    assert "bench/reproducibility.py" in text


def test_the_table_holds_sane_measurements() -> None:
    for s in spread.MEASURED:
        assert s.runs >= 2 and 0 <= s.score_cv < 1 and 0 <= s.regulated_cv < 1 and s.duration_s > 0 and s.slots >= 1
