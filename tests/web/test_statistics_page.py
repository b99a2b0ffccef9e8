"""`/statistics`: shares by vendor and country, efficiency by accelerator model, performance over editions."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from leaderboard.models import Edition, Result

pytestmark = pytest.mark.django_db


def best_of_each_system(results) -> dict[int, Result]:
    best: dict[int, Result] = {}
    for r in results:
        if r.system_id not in best or r.score_ops > best[r.system_id].score_ops:
            best[r.system_id] = r
    return best


def test_statistics_shows_shares_and_editions(client, demo_data):
    demo_data(60, llm_results=6)
    html = client.get("/statistics").content.decode()
    for div in ("chart-vendor", "chart-country", "chart-accelerator", "chart-editions", "chart-vendor-editions"):
        assert f'id="{div}"' in html, div
    # each system's best of either division, on the AIPerf list only: a system counts once
    best = best_of_each_system(Result.objects.entries().filter(workload="image").select_related("system"))
    vendors = Counter(r.system.vendor for r in best.values())
    for vendor, n in vendors.items():
        assert f'<th scope="row">{vendor}</th><td class="num">{n}</td>' in html
    lead = html.replace("&#x27;", "'")
    assert f"holds <strong>{len(best)}</strong> systems (each system's best result of either division)" in lead
    assert ">live</a>" in html


def test_the_llm_list_has_statistics_of_its_own(client, demo_data):
    """AIPerf-LLM's FLOPs are counted by other rules: its systems and scores are never added to the AIPerf list's."""
    from leaderboard.site import format as fmt

    demo_data(60, llm_results=6)
    llm = best_of_each_system(Result.objects.entries().filter(workload="llm"))
    html = client.get("/statistics?workload=llm").content.decode().replace("&#x27;", "'")
    assert "The live AIPerf-LLM list holds" in html and f"<strong>{len(llm)}</strong> system" in html
    assert f"with <strong>{fmt.ops(sum(r.score_ops for r in llm.values()))}</strong> in all" in html
    assert '<option value="llm" selected>' in html and "Shown for the AIPerf list only." in html

    index = client.get("/editions/").content.decode()
    for edition in Edition.objects.exclude(frozen_at=None):
        ranked = edition.entries.exclude(rank=None)
        image, llm_n = ranked.filter(result__workload="image").count(), ranked.filter(result__workload="llm").count()
        row = re.search(rf'<a href="/editions/{edition.name}/">{edition.name}</a>.*?</tr>', index, re.S).group(0)
        cells = re.findall(r'<td class="num">(?:<a [^>]+>)?([^<]+)', row)
        assert cells[0] == str(image) and cells[3] == str(llm_n) and cells[4] == str(edition.entries.count()), row


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
