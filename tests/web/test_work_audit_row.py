"""The result page's "Audit of the work" row: how many drawn segments re-executed to their committed state,
what they were drawn from, and the chance such a draw catches a run that skipped a quarter of its work."""

from __future__ import annotations

import html

import pytest

from leaderboard import listcache
from leaderboard.models import Result

pytestmark = pytest.mark.django_db


def replay(passed: bool, n: int) -> dict:
    return {"name": "audit.replay", "passed": passed, "threshold": 0.2, "measured": 0.01 if passed else 0.9,
            "message": f"trial t0001 epoch 1 steps {16 * n + 1}-{16 * n + 16} on 1 rank(s): "
                       + ("re-executed to the committed state exactly" if passed else
                          "re-executed to 0.9 of the segment's own move away: the committed work is not what "
                          "the segment does")}


def page_text(client, result: Result) -> str:
    listcache.new_generation()  # the report was changed behind the page cache's signals (update())
    return html.unescape(client.get(f"/results/{result.pk}").content.decode())


def test_the_row_says_the_draw_and_its_detection_probability(client, demo_data):
    demo_data(3)
    result = Result.objects.order_by("pk").first()
    segments = {f"t0001/1/{16 * n + 16}": [replay(True, n)] for n in range(17)}
    Result.objects.filter(pk=result.pk).update(audit=Result.Audit.PASSED, audit_report={
        "segments": segments, "best": [], "drawn_from": 40, "committed": 800})
    text = page_text(client, result)
    assert ("17 of 17 segments re-executed to their committed state (drawn from 40 kept of 800 committed: a run "
            "that skipped a quarter of its work is caught by such a draw with probability 99.25 %)") in text

    segments = {f"t0001/1/{16 * n + 16}": [replay(n != 2, n)] for n in range(4)}  # a small run: 4 drawn
    Result.objects.filter(pk=result.pk).update(audit=Result.Audit.FAILED, audit_report={
        "segments": segments, "best": [], "drawn_from": 4, "committed": 90})
    text = page_text(client, result)
    assert "3 of 4 segments re-executed" in text and "with probability 68.36 %" in text
    assert "steps 33-48 on 1 rank(s): re-executed to 0.9 of the segment's own move away" in text
