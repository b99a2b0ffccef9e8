"""A system's and a site's pages keep the AIPerf and AIPerf-LLM lists apart: their FLOPs are counted by different
rules, so runs, ranks, bests and score charts are per list, and an LLM result shows its loss, not an accuracy."""

from __future__ import annotations

import re

import pytest

from leaderboard.models import Result
from leaderboard.site import format as fmt

pytestmark = pytest.mark.django_db


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.fixture
def both(demo_data) -> Result:
    """A demo system with results on both lists (the LLM one of the `llm` preset: open division)."""
    demo_data(60, llm_results=12)
    image_systems = set(Result.objects.filter(workload="image").values_list("system_id", flat=True))
    llm = Result.objects.filter(workload="llm", system_id__in=image_systems).order_by("pk").first()
    assert llm is not None
    return llm


def test_a_systems_page_gives_each_list_its_own_runs_ranks_and_chart(client, both):
    html = client.get(f"/systems/{both.system_id}").content.decode()
    page = text(html)
    llm = Result.objects.filter(system_id=both.system_id, workload="llm", division=both.division)
    image = Result.objects.filter(system_id=both.system_id, workload="image")
    # the Runs table: one row per list and division
    row = re.search(rf"AIPerf-LLM {both.division} (\d+) (\S+ \S+)", page)
    assert row and int(row.group(1)) == llm.count(), page[:3000]
    assert row.group(2) == fmt.ops(max(r.score_ops for r in llm))
    for division in {r.division for r in image}:
        n = image.filter(division=division).count()
        assert re.search(rf"AIPerf {division} {n} ", page), division
    # the results table: the LLM result tagged and showing its loss
    cells = re.search(rf'href="/results/{both.pk}">#{both.pk}</a>.*?</tr>', html, re.S).group(0)
    assert "AIPerf-LLM</span>" in cells and fmt.loss(both.best_loss) in cells
    # a score chart per list
    assert 'id="chart-history"' in html and 'id="chart-history-llm"' in html


def test_a_sites_page_keeps_its_best_scores_apart(client, both):
    html = client.get(f"/sites/{both.site_id}").content.decode()
    assert "Best AIPerf-LLM score" in html and 'id="chart-site-history-llm"' in html
    best_image = max(r.score_ops for r in Result.objects.live().filter(system_id=both.system_id, workload="image"))
    best_llm = max(r.score_ops for r in Result.objects.live().filter(system_id=both.system_id, workload="llm"))
    row = re.search(rf'<a href="/systems/{both.system_id}">.*?</tr>', html, re.S).group(0)
    assert fmt.ops(best_image) in row and fmt.ops(best_llm) in row


def test_compare_takes_one_list_at_a_time(client, both):
    other = Result.objects.filter(workload="image").exclude(system_id=both.system_id).order_by("pk").first()
    ids = f"{both.system_id},{other.system_id}"
    image = client.get(f"/compare?systems={ids}").content.decode()
    llm = client.get(f"/compare?systems={ids}&workload=llm").content.decode()
    best_llm = max(Result.objects.filter(system_id=both.system_id, workload="llm"), key=lambda r: r.score_ops)
    assert f'href="/results/{best_llm.pk}"' in llm and f'href="/results/{best_llm.pk}"' not in image
    assert "compare their AIPerf-LLM results" in image and "compare their AIPerf results" in llm
    assert 'name="workload" value="llm"' in llm  # the form keeps the list
