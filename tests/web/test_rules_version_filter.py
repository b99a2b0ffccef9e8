"""A result keeps the rules version it was verified under: the list, its downloads and the API filter by it
(`?version=` on the pages, `?rules_version=` and `?spec_version=` in the API), ranks staying the list's."""

from __future__ import annotations

import csv
import io
import re

import pytest

from leaderboard.models import Result

pytestmark = pytest.mark.django_db


def row_ids(html: str) -> list[int]:
    return [int(x) for x in re.findall(r'<tr data-result="(\d+)">', html)]


def test_the_list_and_the_api_filter_by_rules_version(client, demo_data):
    demo_data(30)
    listed = list(Result.objects.entries().filter(division="official").order_by("pk")
                  .values_list("pk", "rank", "rules_version"))
    current = listed[0][2]
    older = [pk for pk, _, _ in listed[::3]]
    Result.objects.filter(pk__in=older).update(rules_version="2.0", spec_version="0")
    ranks = {pk: rank for pk, rank, _ in listed}

    html = client.get("/").content.decode()
    options = re.search(r'<select id="f-version" name="version">(.*?)</select>', html, re.S).group(1)
    assert re.findall(r'<option value="([^"]+)"', options) == [current, "2.0"]  # newest first

    page = client.get("/?version=2.0&per=500").content.decode()
    assert sorted(row_ids(page)) == sorted(older)
    assert '<option value="2.0" selected>' in page
    rows = list(csv.DictReader(io.StringIO(client.get("/?version=2.0&format=csv").content.decode())))
    assert {int(r["result_id"]) for r in rows} == set(older) and {r["rules_version"] for r in rows} == {"2.0"}
    assert all(int(r["rank"]) == ranks[int(r["result_id"])] for r in rows)  # the list's ranks, not renumbered

    api = client.get("/api/v1/leaderboard/", {"rules_version": "2.0", "page_size": 500}).json()
    assert sorted(r["id"] for r in api["results"]) == sorted(older)
    assert client.get("/api/v1/results/", {"spec_version": "0"}).json()["count"] == len(older)
    assert client.get("/api/v1/results/", {"rules_version": "9.9"}).json()["count"] == 0
