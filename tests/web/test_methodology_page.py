"""`/methodology`: how the score is computed, the rules in force and their versions, from the spec itself."""

from __future__ import annotations

import pytest
from aiperf_runner.spec import SPEC_VERSION
from aiperf_runner.spec.rules import RULES_VERSION, THRESHOLDS

from leaderboard.pipeline import VERIFIER_VERSION

pytestmark = pytest.mark.django_db


def test_methodology_shows_the_rules_in_force(client):
    html = client.get("/methodology").content.decode()
    assert f"<code>{RULES_VERSION}</code>" in html and f"<code>{SPEC_VERSION}</code>" in html
    assert VERIFIER_VERSION in html
    for name in THRESHOLDS[RULES_VERSION]:
        assert f"<code>{name}</code>" in html, name
    assert "Regulated score" in html and "|ln(1 − best accuracy so far)|" in html
    assert "/api/docs/" in html
