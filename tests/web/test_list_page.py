"""`/`: the ranked list — columns, filters and sorting in the URL, pages, and downloads of exactly that view."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leaderboard import ranking
from leaderboard.models import Result, Submission

pytestmark = pytest.mark.django_db


def row_ids(html: str) -> list[int]:
    return [int(x) for x in re.findall(r'<tr data-result="(\d+)">', html)]


def csv_rows(body: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(body.decode())))


def test_list_shows_every_column_with_units(client, demo_data):
    demo_data(30)
    resp = client.get("/")
    assert resp.status_code == 200
    html = resp.content.decode()
    for heading in ("Rank", "System", "Site", "Country", "Accelerator", "Nodes", "Score", "Regulated score",
                    "Best accuracy", "Efficiency", "Precision", "Trust", "Verification", "Date"):
        assert f">{heading}<" in html or f">{heading}<span" in html, heading
    # One division per table: the official one by default, one entry per system, counted as systems.
    official = Result.objects.entries().filter(division="official")
    top = official.order_by("-score_ops").first()
    assert row_ids(html)[0] == top.pk
    assert re.search(r"\d+(\.\d+)? [TPE]OPS", html)  # SI-prefixed OPS
    assert f"× {top.system.accelerator_count}" in html
    assert len(row_ids(html)) == official.count()
    assert f"{official.count()} systems (each system's best result) in the official division" in html
    assert f'<td class="col-system"><a href="/systems/{top.system_id}">' in html  # the name links to the system
    every = client.get("/?all=1&per=500").content.decode()
    assert len(row_ids(every)) == Result.objects.live().filter(division="official").count()
    opened = client.get("/?division=open&per=500").content.decode()
    assert set(row_ids(opened)) == set(Result.objects.entries().filter(division="open").values_list("pk", flat=True))
    assert 'aria-current="page">Open<' in opened


def test_ranks_match_the_service_ranking(client, demo_data):
    demo_data(40)
    html = client.get("/?per=500").content.decode()
    ranks = ranking.live_ranks()
    rows = re.findall(r'<tr data-result="(\d+)">\s*<td class="num col-rank">(\d+)</td>', html)
    assert rows and all(ranks[int(pk)] == int(rank) for pk, rank in rows)


def test_ranks_stay_those_of_the_whole_division_when_filtered(client, demo_data):
    demo_data(40)
    country = Result.objects.live().values_list("site__country", flat=True).first()
    html = client.get(f"/?country={country}").content.decode()
    ranks = ranking.live_ranks()
    rows = re.findall(r'<tr data-result="(\d+)">\s*<td class="num col-rank">(\d+)</td>', html)
    assert rows and all(ranks[int(pk)] == int(rank) for pk, rank in rows)


@pytest.mark.parametrize("param,lookup", [
    ("division", "division"), ("vendor", "system__vendor"), ("accelerator", "system__accelerator_model"),
    ("country", "site__country"),
])
def test_each_filter_keeps_only_matching_rows(client, demo_data, param, lookup):
    demo_data(60)
    shown = Result.objects.entries() if param == "division" else Result.objects.entries().filter(division="official")
    value = shown.values_list(lookup, flat=True).order_by(lookup).first()
    resp = client.get("/", {param: value, "per": 500})
    ids = row_ids(resp.content.decode())
    expected = set(shown.filter(**{lookup: value}).values_list("pk", flat=True))
    assert ids and set(ids) == expected
    # the form shows the filter as selected, so the view is reproducible from the page itself
    assert re.search(rf'<option value="{re.escape(str(value))}" selected>', resp.content.decode())


def test_sorting_by_links_and_direction(client, demo_data):
    demo_data(50)
    html = client.get("/").content.decode()
    assert 'href="/?sort=-score"' in html  # numeric columns sort highest first on the first click
    assert 'href="/?sort=site"' in html
    ids = row_ids(client.get("/?sort=-nodes&per=500").content.decode())
    nodes = [Result.objects.get(pk=i).system.nodes for i in ids]
    assert nodes == sorted(nodes, reverse=True)
    ids = row_ids(client.get("/?sort=accuracy&per=500").content.decode())
    acc = [Result.objects.get(pk=i).max_accuracy for i in ids]
    assert acc == sorted(acc)
    sorted_html = client.get("/?sort=-nodes").content.decode()
    assert 'aria-sort="descending"' in sorted_html
    assert 'href="/?sort=nodes"' in sorted_html  # the next click reverses it


def test_unknown_parameters_are_ignored(client, demo_data):
    demo_data(10)
    resp = client.get("/?sort=;drop&division=bogus&page=x&per=-3")
    assert resp.status_code == 200
    assert len(row_ids(resp.content.decode())) == Result.objects.entries().filter(division="official").count()


def test_pages_and_their_links_keep_the_filters(client, demo_data):
    demo_data(60)
    n = Result.objects.live().filter(division="official").count()
    assert n > 10
    html = client.get("/?division=official&per=10&sort=-score").content.decode()
    assert len(row_ids(html)) == 10
    assert "division=official" in re.search(r'<a href="([^"]+)" rel="next">', html).group(1).replace("&amp;", "&")
    page2 = client.get("/?division=official&per=10&sort=-score&page=2").content.decode()
    assert not set(row_ids(html)) & set(row_ids(page2))
    assert client.get("/?page=999").status_code == 200  # out of range: the last page


def download_links(html: str) -> dict[str, str]:
    part = html[html.index('class="downloads"'):]
    part = part[:part.index("</p>")]
    links = [h.replace("&amp;", "&") for h in re.findall(r'<a href="([^"]+)" download>', part)]
    return {"csv": links[0], "json": links[1], **({"all_csv": links[2], "all_json": links[3]} if len(links) > 2 else {})}


def test_csv_and_json_downloads_are_exactly_the_rows_shown(client, demo_data):
    demo_data(80)
    query = "division=official&all=1&sort=-efficiency&per=25&page=2"
    html = client.get(f"/?{query}").content.decode()
    shown = row_ids(html)
    assert len(shown) == 25
    links = download_links(html)
    resp = client.get(links["csv"])  # the page's own link
    assert resp["Content-Type"].startswith("text/csv")
    assert "attachment" in resp["Content-Disposition"]
    rows = csv_rows(resp.content)
    assert [int(r["result_id"]) for r in rows] == shown
    first = Result.objects.get(pk=shown[0])
    assert float(rows[0]["score_ops"]) == first.score_ops
    assert rows[0]["rank"] == str(ranking.live_ranks(all_results=True)[first.pk])
    assert rows[0]["url"].endswith(f"/results/{first.pk}")
    data = client.get(links["json"]).json()
    assert [r["result_id"] for r in data["results"]] == shown
    assert data["filters"] == {"division": "official", "all": "1"} and data["sort"] == "-efficiency" and data["page"] == 2
    everything = client.get(links["all_json"]).json()
    assert everything["count"] == len(everything["results"]) == Result.objects.live().filter(division="official").count()


def test_the_whole_filtered_list_downloads_too(client, demo_data):
    demo_data(60)
    data = client.get("/?division=open&per=all&format=json").json()
    expected = Result.objects.entries().filter(division="open").count()
    assert data["count"] == expected == len(data["results"])
    # "all" is for downloads; the HTML page stays paged
    assert len(row_ids(client.get("/?per=all").content.decode())) <= 500


def test_withdrawn_and_unpublished_results_are_not_listed(client, demo_data):
    demo_data(12)
    gone = Result.objects.live().first()
    Submission.objects.filter(pk=gone.submission_id).update(status=Submission.Status.WITHDRAWN)
    hidden = Result.objects.live().last()
    Result.objects.filter(pk=hidden.pk).update(published=False)
    ranking.rerank()  # changes behind the service's back need one (docs/service.md "Ranks and editions")
    ids = row_ids(client.get("/").content.decode())
    assert gone.pk not in ids and hidden.pk not in ids


def test_an_empty_list_says_so(client):
    html = client.get("/").content.decode()
    assert "No results on this list" in html


def test_the_table_works_without_javascript(client, demo_data):
    demo_data(10)
    html = client.get("/").content.decode()
    assert re.search(r'<form class="filters" method="get"', html)
    for name in ("division", "vendor", "accelerator", "country", "edition"):
        assert f'<label for="f-{name}">' in html and f'id="f-{name}" name="{name}"' in html
    assert "<script" not in html  # nothing on the list needs a script
    assert '<th scope="col"' in html and "<caption" in html


def test_query_count_does_not_grow_with_rows(client, demo_data, settings):
    settings.AIPERF_PAGE_CACHE_S = 0  # the queries of a rendering, not a cached page's (none)
    demo_data(5)
    client.get("/")  # warm caches (content types, sessions)
    with CaptureQueriesContext(connection) as small:
        assert client.get("/").status_code == 200
    with CaptureQueriesContext(connection) as small_csv:
        client.get("/?format=csv")
    demo_data(50, seed=2)
    assert Result.objects.live().count() > 40
    with CaptureQueriesContext(connection) as large:
        assert client.get("/").status_code == 200
    with CaptureQueriesContext(connection) as large_csv:
        client.get("/?format=csv")
    assert len(large) == len(small), [q["sql"] for q in large.captured_queries]
    assert len(large_csv) == len(small_csv)
    assert len(large) <= 10
