"""An audit's report holds only what JSON and PostgreSQL hold: a segment that claimed steps it never trained (its
committed end is its start) fails `audit.replay` with its own words and no ratio; an infinity or NaN anywhere in a
report is stored as null. Once, an infinite ratio failed every delivery of the audit task: the result stayed
"audit pending" for ever and `aiperf-runner submit` waited on it."""

from __future__ import annotations

import math

import pytest

from leaderboard import audit
from leaderboard.models import Result

SEG = {"trial": "t0004", "epoch": 2, "first": 3, "last": 6, "world": 1}


@pytest.mark.parametrize("verdict", [
    {"passed": False, "exact": False, "ratio": None, "still": True, "distance": 0.42},
    {"passed": False, "exact": False, "ratio": math.inf, "distance": 0.42},  # a runner of before 5 December
], ids=["still", "infinite"])
def test_a_segment_that_never_moved_fails_the_replay_without_a_ratio(verdict) -> None:
    check = audit.replay_check(SEG, verdict, 0.2)
    assert not check["passed"] and check["measured"] is None, check
    assert "the committed states did not move over these steps" in check["message"]
    assert "the committed work is not what the segment does" in check["message"]


def test_a_report_with_an_infinity_is_stored(db) -> None:
    from devdata import demo

    demo.generate(3)
    result = Result.objects.order_by("pk").first()
    audit._set(result, Result.Audit.FAILED, {"segments": {"t0004/2/6": [{"name": "audit.replay",
                                                                         "measured": math.inf, "threshold": 0.2}]},
                                             "best": [{"measured": math.nan}], "seconds": {"t0004": 1.5}})
    stored = Result.objects.get(pk=result.pk)
    assert stored.audit == Result.Audit.FAILED
    assert stored.audit_report["segments"]["t0004/2/6"][0]["measured"] is None
    assert stored.audit_report["best"][0]["measured"] is None and stored.audit_report["seconds"]["t0004"] == 1.5
