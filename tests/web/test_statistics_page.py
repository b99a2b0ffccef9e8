"""`/statistics`: shares by vendor and country, performance over editions."""

from __future__ import annotations

import pytest
from django.db.models import Count

from leaderboard.models import Result

pytestmark = pytest.mark.django_db


def test_statistics_shows_shares_and_editions(client, demo_data):
    demo_data(60)
    html = client.get("/statistics").content.decode()
    for div in ("chart-vendor", "chart-country", "chart-accelerator", "chart-editions", "chart-vendor-editions"):
        assert f'id="{div}"' in html, div
    counts = Result.objects.entries().values("system__vendor").annotate(n=Count("pk"))  # each system's best
    for row in counts:
        assert f'<th scope="row">{row["system__vendor"]}</th><td class="num">{row["n"]}</td>' in html
    assert ">live</a>" in html


def test_statistics_by_division(client, demo_data):
    demo_data(60)
    n = Result.objects.entries().filter(division="official").count()
    html = client.get("/statistics?division=official").content.decode()
    assert f"holds <strong>{n}</strong> systems (each system's best result)" in html.replace("&#x27;", "'")


def test_statistics_of_an_empty_list(client):
    resp = client.get("/statistics")
    assert resp.status_code == 200 and "No results yet" in resp.content.decode()
