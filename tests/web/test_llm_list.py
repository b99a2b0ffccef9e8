"""AIPerf-LLM's own list: `?workload=llm` on the pages and the API lists its results, ranked among themselves (their
FLOP rules llm-v1), with the best loss where the image list shows accuracy; the image list never shows them."""

from __future__ import annotations

import csv
import io
import re

import pytest

from leaderboard import ranking
from leaderboard.models import Result, ResultSeries, Trial

pytestmark = pytest.mark.django_db


def row_ids(html: str) -> list[int]:
    return [int(x) for x in re.findall(r'<tr data-result="(\d+)">', html)]


@pytest.fixture
def llm_results(demo_data) -> list[int]:
    """Twenty demo results, four of them made AIPerf-LLM results (their losses 1.1 to 1.4 nats)."""
    demo_data(20)
    picked = list(Result.objects.live().order_by("pk").values_list("pk", flat=True)[::5])
    for i, pk in enumerate(picked):
        Result.objects.filter(pk=pk).update(workload="llm", rules="llm-v1", best_loss=1.1 + 0.1 * i,
                                            division="open")
    ranking.rerank()
    return picked


def test_the_llm_list_holds_only_llm_results_ranked_among_themselves(client, llm_results):
    image = client.get("/?division=open&all=1&per=500").content.decode()
    assert not set(row_ids(image)) & set(llm_results)
    assert "Best accuracy" in image and "The AIPerf list" in image

    page = client.get("/?workload=llm&division=open&all=1").content.decode()
    assert sorted(row_ids(page)) == sorted(llm_results)
    assert "The AIPerf-LLM list" in page and "Best loss" in page and "Best accuracy" not in page
    assert 'name="workload" value="llm"' in page  # the filter form keeps the list
    ranks = dict(Result.objects.filter(pk__in=llm_results).values_list("pk", "rank_all"))
    assert sorted(ranks.values()) == [1, 2, 3, 4]  # ranked apart from the image results

    rows = list(csv.DictReader(io.StringIO(client.get("/?workload=llm&division=open&all=1&format=csv")
                                           .content.decode())))
    assert {int(r["result_id"]) for r in rows} == set(llm_results)
    assert {r["workload"] for r in rows} == {"llm"} and all(float(r["best_loss"]) >= 1.1 for r in rows)
    by_loss = client.get("/?workload=llm&division=open&all=1&sort=loss").content.decode()
    assert row_ids(by_loss) == llm_results  # lowest loss first


def test_the_api_filters_by_workload(client, llm_results):
    llm = client.get("/api/v1/leaderboard/", {"workload": "llm", "all": 1, "division": "open"}).json()
    assert sorted(r["id"] for r in llm["results"]) == sorted(llm_results)
    assert {r["workload"] for r in llm["results"]} == {"llm"} and {r["rules"] for r in llm["results"]} == {"llm-v1"}
    images = client.get("/api/v1/results/", {"all": 1, "page_size": 500}).json()["results"]
    assert images and not {r["id"] for r in images} & set(llm_results)
    assert {r["workload"] for r in images} == {"image"}


def test_an_llm_result_page_draws_its_loss(client, llm_results):
    r = Result.objects.get(pk=llm_results[0])
    ResultSeries.objects.filter(result=r).update(points=[
        {"t": 10.0, "score": 1e9, "regulated": 4e8, "best_loss": 2.5},
        {"t": 60.0, "score": 2e9, "regulated": 9e8, "best_loss": 1.1}])
    r.trials.all().delete()
    Trial.objects.create(result=r, trial="t0001", slot=0, started_s=0, ended_s=10, best_loss=2.5, status="finished",
                         train_flops_per_image=5e5)
    Trial.objects.create(result=r, trial="t0002", parent="t0001", morphisms=["insert_block"], slot=0, started_s=10,
                         ended_s=60, best_loss=1.1, status="finished", train_flops_per_image=8e5)
    html = client.get(f"/results/{r.pk}").content.decode()
    assert 'id="fig-loss"' in html and 'id="fig-accuracy"' not in html
    assert "Best validation loss" in html and "1.1000 nats" in html and "FLOP/token" in html
    rows = list(csv.DictReader(io.StringIO(client.get(f"/results/{r.pk}/series.csv").content.decode())))
    assert list(rows[0]) == ["t", "score", "regulated", "best_loss"] and rows[-1]["best_loss"] == "1.1"
