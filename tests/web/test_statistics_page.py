"""`/statistics`: shares by vendor and country, efficiency by accelerator model, performance over editions."""

from __future__ import annotations

import re

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


def test_reference_efficiency_per_accelerator_model(client, demo_data):
    """Median and best efficiency per accelerator model and precision, over each system's best live result,
    on the statistics page; a system's page reads its own against its peers'."""
    import statistics as stats

    from leaderboard.models import Result
    from leaderboard.site import format as fmt

    demo_data(60)
    best = Result.objects.listed().filter(rank__isnull=False, efficiency__isnull=False, rules="v2",
                                          division="official").exclude(system__accelerator_count=0)
    model, precision = best.values_list("system__accelerator_model", "precision").first()
    peers = [r.efficiency for r in best.filter(system__accelerator_model=model, precision=precision)]
    html = client.get("/statistics?division=official").content.decode()
    assert "Efficiency by accelerator model" in html
    row = re.search(rf'<tr><th scope="row">{re.escape(model)}</th><td>{precision}</td>'
                    r'<td class="num">(\d+)</td><td class="num">([^<]+)</td><td class="num">([^<]+)</td>', html)
    assert row, model
    assert int(row.group(1)) == len(peers)
    assert row.group(2) == fmt.percent(stats.median(peers)) and row.group(3) == fmt.percent(max(peers))
    mine = best.filter(system__accelerator_model=model, precision=precision).first()
    page = client.get(f"/systems/{mine.system_id}").content.decode()
    assert "Efficiency against its peers" in page and fmt.percent(mine.efficiency) in page
    if len(peers) > 1:
        assert f"the median of the {len(peers)} systems with {model} at {precision}" in page
