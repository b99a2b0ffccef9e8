"""`/editions/` and `/editions/<name>/`: frozen lists with their own URLs, filters and downloads."""

from __future__ import annotations

import re

import pytest

from leaderboard import ranking
from leaderboard.models import Edition, Result, Submission

pytestmark = pytest.mark.django_db


def test_index_lists_frozen_editions(client, demo_data):
    demo_data(40)
    Edition.objects.create(name="draft")  # not frozen: not listed
    html = client.get("/editions/").content.decode()
    frozen = Edition.objects.filter(frozen_at__isnull=False)
    assert frozen.exists()
    for e in frozen:
        assert f'href="/editions/{e.name}/"' in html
    assert "/editions/draft/" not in html
    assert client.get("/editions/draft/").status_code == 404
    assert client.get("/editions/nope/").status_code == 404


def test_an_edition_shows_its_frozen_ranks_and_scores(client, demo_data):
    demo_data(40)
    e = Edition.objects.filter(frozen_at__isnull=False).order_by("name").first()
    entries = {x.result_id: x for x in e.entries.all()}
    # the live figures move on; the edition keeps its own
    some = next(iter(entries))
    Result.objects.filter(pk=some).update(score_ops=1.0)
    Submission.objects.filter(result__pk=some).update(status=Submission.Status.WITHDRAWN)
    html = client.get(f"/editions/{e.name}/?per=500").content.decode()
    rows = re.findall(r'<tr data-result="(\d+)">\s*<td class="num col-rank">(\d+)</td>', html)
    assert {int(pk) for pk, _ in rows} == set(entries)
    assert all(entries[int(pk)].rank == int(rank) for pk, rank in rows)
    data = client.get(f"/editions/{e.name}/?per=all&format=json").json()
    assert data["list"] == e.name
    by_id = {r["result_id"]: r for r in data["results"]}
    assert by_id[some]["score_ops"] == entries[some].score_ops != 1.0
    # the same edition through the list's filter form
    alt = client.get(f"/?edition={e.name}&per=500").content.decode()
    assert re.findall(r'<tr data-result="(\d+)">', alt) == [pk for pk, _ in rows]
    assert f'<link rel="canonical" href="/editions/{e.name}/">' in alt


def test_edition_filters_work(client, demo_data):
    demo_data(40)
    e = Edition.objects.filter(frozen_at__isnull=False).order_by("-name").first()
    html = client.get(f"/editions/{e.name}/?division=open&per=500").content.decode()
    ids = [int(x) for x in re.findall(r'<tr data-result="(\d+)">', html)]
    # each system's best entry, as the live list (?all=1: every entry)
    assert ids and set(ids) == set(e.entries.filter(division="open").exclude(rank=None).values_list("result_id", flat=True))
    every = client.get(f"/editions/{e.name}/?division=open&all=1&per=500").content.decode()
    assert {int(x) for x in re.findall(r'<tr data-result="(\d+)">', every)} == set(
        e.entries.filter(division="open").values_list("result_id", flat=True))
    assert ranking.edition_ranks(e)


def test_an_edition_shows_each_systems_previous_rank_or_new(client, demo_data):
    demo_data(80)
    editions = list(Edition.objects.filter(frozen_at__isnull=False).order_by("frozen_at"))
    assert len(editions) >= 2
    before, edition = editions[-2], editions[-1]
    prev = {(e.result.system_id, e.division): e.rank for e in before.entries.exclude(rank=None).select_related("result")}
    html = client.get(f"/editions/{edition.name}/?per=500").content.decode()
    assert '<th scope="col" class="col-previous num"' in html
    rows = re.findall(r'<tr data-result="(\d+)">\s*<td class="num col-rank">\d+</td><td class="num col-previous">(.*?)</td>',
                      html)
    assert rows
    for pk, cell in rows:
        r = Result.objects.get(pk=pk)
        was = prev.get((r.system_id, "official"))
        assert (str(was) == cell) if was is not None else ("new" in cell), (pk, cell)
    first = client.get(f"/editions/{editions[0].name}/").content.decode()
    assert "col-previous" not in first  # the first edition has none before it
