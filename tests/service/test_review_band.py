"""The review band (rules 3.0): an official result waits for a maintainer when its efficiency is more than
1.5 x the median of its accelerator model's official results (three or more), or above 0.6 of peak; not
against the best earlier result, which one inflated result would raise for every later one (rules 2.0)."""

from __future__ import annotations

import itertools

import pytest

from leaderboard import pipeline
from leaderboard.models import Result, Site, Submission, System

pytestmark = pytest.mark.django_db

_ids = itertools.count()
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def system() -> System:
    site = Site.objects.create(name="Measured", country="DE")
    return System.objects.create(site=site, accelerator_model=H100, identity="h")


def official(system: System, efficiency: float) -> Result:
    n = next(_ids)
    sub = Submission.objects.create(site=system.site, sha256=f"{n:064x}", size=1, run_id=f"{n:032x}",
                                    status=Submission.Status.VERIFIED)
    return Result.objects.create(submission=sub, site=system.site, system=system, run_id=sub.run_id,
                                 division="official", score_ops=1.0, regulated_score_ops=1.0, max_accuracy=0.8,
                                 duration_s=3600.0, rules_version="3.0", verifier_version="test",
                                 verification_level="full", report={}, published=True, efficiency=efficiency)


def why(efficiency: float, rules_version: str = "3.0") -> str:
    return pipeline.review_needed({"division": "official", "efficiency": efficiency, "rules_version": rules_version},
                                  H100, None)


def test_the_band_is_the_median_of_the_models_measured_efficiencies(system) -> None:
    for e in (0.20, 0.22, 0.25):
        official(system, e)
    assert why(0.33) == ""  # 1.32 x the median 0.22
    reason = why(0.34)
    assert "more than 1.5x the median of the 3 official results" in reason and "(22.0%)" in reason
    assert "above 60%" in why(0.61)


def test_one_inflated_result_does_not_open_the_band(system) -> None:
    for e in (0.20, 0.22, 0.25):
        official(system, e)
    official(system, 0.55)  # an outlier that got through: under 2.0 it made every result up to 0.69 pass
    assert "more than 1.5x the median of the 4 official results" in why(0.45)
    assert "more than 1.25x the best official result" not in why(0.45, "2.0")
    assert why(0.45, "2.0") == ""


def test_too_few_measured_results_leave_only_the_outright_bound(system) -> None:
    official(system, 0.10)
    official(system, 0.10)
    assert why(0.50) == ""
    assert "above 60%" in why(0.61)
