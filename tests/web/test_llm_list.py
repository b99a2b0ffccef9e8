"""AIPerf-LLM's own list: `?workload=llm` on the pages and the API lists its results, ranked among themselves (their
FLOP rules llm-v1), with the best loss where the image list shows accuracy; the image list never shows them."""

from __future__ import annotations

import csv
import io
import re

import pytest

from leaderboard.models import Result, ResultSeries, Trial

pytestmark = pytest.mark.django_db


def row_ids(html: str) -> list[int]:
    return [int(x) for x in re.findall(r'<tr data-result="(\d+)">', html)]


@pytest.fixture
def llm_results(demo_data) -> list[int]:
    """Twenty demo results and six AIPerf-LLM ones, each spec.verify's report of a generated run (llm-kjv official,
    llm open: devdata/llmdemo.py)."""
    demo_data(20, llm_results=6)
    return list(Result.objects.filter(workload="llm").order_by("pk").values_list("pk", flat=True))


def test_the_llm_list_holds_only_llm_results_ranked_among_themselves(client, llm_results):
    assert len(llm_results) == 6
    for division in ("official", "open"):
        image = client.get(f"/?division={division}&all=1&per=500").content.decode()
        assert not set(row_ids(image)) & set(llm_results)
        assert "Best accuracy" in image and "The AIPerf list" in image

        theirs = Result.objects.filter(pk__in=llm_results, division=division)
        assert theirs.exists(), division
        page = client.get(f"/?workload=llm&division={division}&all=1").content.decode()
        assert sorted(row_ids(page)) == sorted(theirs.values_list("pk", flat=True))
        assert "The AIPerf-LLM list" in page and "Best loss" in page and "Best accuracy" not in page
        assert 'name="workload" value="llm"' in page  # the filter form keeps the list
        ranks = sorted(theirs.values_list("rank_all", flat=True))
        assert ranks == list(range(1, len(ranks) + 1))  # ranked apart from the image results

        rows = list(csv.DictReader(io.StringIO(client.get(f"/?workload=llm&division={division}&all=1&format=csv")
                                               .content.decode())))
        assert {int(r["result_id"]) for r in rows} == set(theirs.values_list("pk", flat=True))
        assert {r["workload"] for r in rows} == {"llm"}
        assert {int(r["result_id"]): float(r["best_loss"]) for r in rows} == dict(theirs.values_list("pk", "best_loss"))
        by_loss = client.get(f"/?workload=llm&division={division}&all=1&sort=loss").content.decode()
        assert row_ids(by_loss) == list(theirs.order_by("best_loss").values_list("pk", flat=True))  # lowest first


def test_the_api_filters_by_workload(client, llm_results):
    for division in ("official", "open"):
        llm = client.get("/api/v1/leaderboard/", {"workload": "llm", "all": 1, "division": division}).json()
        assert sorted(r["id"] for r in llm["results"]) == \
            sorted(Result.objects.filter(pk__in=llm_results, division=division).values_list("pk", flat=True))
        assert {r["workload"] for r in llm["results"]} == {"llm"} and {r["rules"] for r in llm["results"]} == {"llm-v1"}
    images = client.get("/api/v1/results/", {"all": 1, "page_size": 500}).json()["results"]
    assert images and not {r["id"] for r in images} & set(llm_results)
    assert {r["workload"] for r in images} == {"image"}


def test_an_llm_result_page_draws_its_loss(client, llm_results):
    r = Result.objects.get(pk=llm_results[0])
    html = client.get(f"/results/{r.pk}").content.decode()
    assert 'id="fig-loss"' in html and 'id="fig-accuracy"' not in html
    assert "Best validation loss" in html and f"{r.best_loss:.4f} nats" in html and "FLOP/token" in html
    rows = list(csv.DictReader(io.StringIO(client.get(f"/results/{r.pk}/series.csv").content.decode())))
    assert list(rows[0]) == ["t", "score", "regulated", "best_loss"] and float(rows[-1]["best_loss"]) == r.best_loss
    assert len(rows) == len(ResultSeries.objects.get(result=r).points) > 10  # a point per finished trial
    assert Trial.objects.filter(result=r, best_loss=r.best_loss).exists()


def test_the_llm_lists_notes_explain_its_own_score_and_division(client, llm_results):
    page = client.get("/?workload=llm").content.decode()
    notes = page[page.index('id="notes-h"'):]
    assert "every token trained in a finished trial" in notes and "llm-v1" in notes
    assert "official AIPerf-LLM preset (llm-kjv)" in notes and "ImageNet" not in notes
    image = client.get("/").content.decode()
    assert "the ImageNet workload" in image[image.index('id="notes-h"'):]
