"""`/sites/<id>`: the site, its systems, its results, its keys."""

from __future__ import annotations

import pytest

from leaderboard.models import Result, Site
from tests.web.charts import figure

pytestmark = pytest.mark.django_db


def test_site_page_lists_systems_results_and_keys(client, demo_data):
    demo_data(30)
    site = Site.objects.order_by("pk").first()
    html = client.get(f"/sites/{site.pk}").content.decode()
    assert site.name in html and "(" + site.country + ")" in html
    for system in site.systems.all():
        assert f'href="/systems/{system.pk}"' in html
    for r in Result.objects.live().filter(site=site):
        assert f'href="/results/{r.pk}"' in html
    for key in site.keys.all():
        assert key.fingerprint in html
    assert 'id="chart-site-history"' in html


def test_the_sites_history_draws_one_line_per_system(client, demo_data):
    """Results of different machines are not one series: each system is a line of its own."""
    demo_data(40)
    site = max(Site.objects.all(), key=lambda s: s.systems.filter(results__in=Result.objects.live()).distinct().count())
    live = Result.objects.live().filter(site=site)
    systems = set(live.values_list("system_id", flat=True))
    assert len(systems) >= 2, "the demo data should give a site two systems with results"
    fig = figure(client.get(f"/sites/{site.pk}").content.decode(), "chart-site-history")
    assert len(fig["data"]) == len(systems)
    assert sum(len(trace["x"]) for trace in fig["data"]) == live.count()


def test_unknown_site_is_not_found(client):
    assert client.get("/sites/424242").status_code == 404
