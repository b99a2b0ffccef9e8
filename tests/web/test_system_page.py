"""`/systems/<id>`: hardware facts, every result, the score history and the scaling chart."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from leaderboard.models import Result, System
from tests.web.charts import figure

pytestmark = pytest.mark.django_db


def family_system(min_nodes: int = 2) -> System:
    """A system whose site has other systems with the same accelerator (a scaling family)."""
    for s in System.objects.filter(nodes__gte=min_nodes).order_by("-nodes"):
        if System.objects.filter(site=s.site, accelerator_model=s.accelerator_model).exclude(pk=s.pk).exists() \
                and Result.objects.live().filter(system=s).exists():
            return s
    raise AssertionError("the generated demo data has no scaling family (a site with one accelerator model "
                         f"on {min_nodes}+ nodes and on other systems)")


def test_system_page_shows_facts_and_every_result(client, demo_data):
    demo_data(80)
    s = family_system()
    html = client.get(f"/systems/{s.pk}").content.decode()
    assert s.accelerator_model in html and f"{s.accelerator_count} × {s.accelerator_model}" in html
    assert s.interconnect in html and s.vendor in html
    assert "<dt>Peak, bf16</dt>" in html and "FLOP/s" in html  # demo systems are registered
    for r in Result.objects.live().filter(system=s):
        assert f'href="/results/{r.pk}"' in html
    assert 'id="chart-history"' in html


def test_scaling_chart_has_points_and_the_linear_line(client, demo_data):
    demo_data(80)
    s = family_system()
    html = client.get(f"/systems/{s.pk}").content.decode()
    assert 'id="chart-scaling"' in html
    data = figure(html, "chart-scaling")["data"]
    names = [t["name"] for t in data]
    assert "this system" in names and "linear scaling" in names
    line = next(t for t in data if t["name"] == "linear scaling")
    # the line is proportional to the node count
    (x0, x1), (y0, y1) = line["x"], line["y"]
    assert x1 > x0 and y1 / y0 == pytest.approx(x1 / x0) if x0 else y0 == 0
    here = next(t for t in data if t["name"] == "this system")
    assert set(here["x"]) == {s.nodes}


def test_a_registered_system_shows_the_peak_it_is_judged_by_and_its_memory(client):
    """Registered through the API, a system has no declared peak: its page shows the peak table's, for the whole
    system and per accelerator; an unregistered one shows what its run.json declared."""
    from leaderboard import systems
    from leaderboard.models import Site

    site = Site.objects.create(name="Real Lab", country="DE")
    s = systems.register(site, {"name": "Real H100", "accelerator_model": "NVIDIA H100 80GB HBM3",
                                "accelerators_per_node": 8, "nodes": 4, "memory_per_node": 2 * 2**40})
    html = client.get(f"/systems/{s.pk}").content.decode()
    assert "<dt>Peak, bf16</dt><dd>31.7 PFLOP/s (32 × 989 TFLOP/s, the list&#x27;s peak table)</dd>" in html
    assert "<dt>Memory per node</dt><dd>2.00 TiB</dd>" in html
    declared = System.objects.create(site=site, accelerator_model="Some GPU", accelerator_count=2, nodes=1,
                                     identity="x", peak_flops={"bf16": 2e15})
    html = client.get(f"/systems/{declared.pk}").content.decode()
    assert "<dt>Declared peak, bf16</dt><dd>2.00 PFLOP/s</dd>" in html and "<dt>Peak," not in html


def test_unknown_system_is_not_found(client):
    assert client.get("/systems/424242").status_code == 404


def test_system_without_results(client, demo_data):
    demo_data(5)
    s = System.objects.first()
    Result.objects.filter(system=s).update(published=False)
    resp = client.get(f"/systems/{s.pk}")
    assert resp.status_code == 200
    assert re.search(r"No results on the list yet|result", resp.content.decode())


def test_score_history_of_one_result_spans_days_not_milliseconds():
    from leaderboard.site.charts import _date_range

    one = _date_range(["2026-07-29T14:25:21.661000+00:00"])
    start, end = (datetime.fromisoformat(x) for x in one["range"])
    assert end - start == timedelta(days=30) and start < datetime.fromisoformat("2026-07-29T14:25:21+00:00") < end
    assert _date_range(["2025-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00"]) == {}  # spread: plotly's own


def test_a_system_page_summarises_its_runs_and_ranks_by_edition(client, demo_data):
    import statistics

    from leaderboard.models import EditionEntry, System
    from leaderboard.site import format as fmt

    demo_data(80)
    entry = EditionEntry.objects.exclude(rank=None).order_by("-edition__frozen_at").select_related("result").first()
    s = System.objects.get(pk=entry.result.system_id)
    System.objects.filter(pk=s.pk).update(memory_per_node=512 * 1024**3)
    page = client.get(f"/systems/{s.pk}").content.decode()
    assert "Memory per node</dt><dd>512 GiB" in page
    assert "Rank by edition" in page and f'href="/editions/{entry.edition.name}/"' in page
    from leaderboard.site.queries import visible_results

    scores = [r.score_ops for r in visible_results().filter(system=s, division=entry.division)]
    assert f"<td class=\"num\">{len(scores)}</td>" in page
    assert f"<td class=\"num\">{fmt.ops(statistics.median(scores))}</td>" in page
