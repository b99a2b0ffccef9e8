"""Every API list and CSV export costs a bounded number of queries whatever the number of rows (no query per
row): measured on 5 and on 50 generated results, and no statement is made twice with other ids.
bench/api_lists.py times them at 10,000."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leaderboard.models import Result, Submission

LISTS = ["/api/v1/leaderboard/", "/api/v1/results/", "/api/v1/systems/", "/api/v1/sites/", "/api/v1/editions/",
         "/api/v1/submissions/"]
URLS = [u for url in LISTS for u in (url, f"{url}?format=csv", f"{url}?page_size=1000")]
MOST = 12  # queries of one list request, whatever its rows


def shape(sql: str) -> str:
    """The statement with its numbers taken out: the same shape twice in one request is a query per row."""
    return re.sub(r"\d+", "?", sql)


def queries(client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
        assert response.status_code == 200, (url, response.content[:300])
    return [q["sql"] for q in ctx.captured_queries]


@pytest.mark.parametrize("url", URLS)
def test_a_list_costs_the_same_queries_for_5_or_50_results(client, db, demo_data, settings, url):
    settings.AIPERF_PAGE_CACHE_S = 0  # a rendering's queries, not a cached answer's
    demo_data(5)
    queries(client, url)  # warm: content types, the first connection
    small = queries(client, url)
    demo_data(50, seed=2)
    assert Result.objects.live().count() > 40 and Submission.objects.count() >= 50
    large = queries(client, url)
    repeated = [sql for sql, n in Counter(map(shape, large)).items() if n > 1]
    assert not repeated, repeated
    # A page's facts may take a query more once it has rows of a kind (a withdrawn result), never one a row.
    assert len(large) <= max(len(small) + 2, 1) and len(large) <= MOST, "\n".join(large)
