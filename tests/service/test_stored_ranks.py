"""The list read from its stored ranks (`Result.objects.listed()`, the list's indexes) and served from the page
cache (leaderboard/listcache.py): what a reader sees follows every publish, withdrawal and re-rank at once;
`manage.py aiperf_rerank` repairs, and `--check` reports, ranks changed behind the service's back."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from leaderboard import pipeline, ranking
from leaderboard.models import Result, Site, System
from tests.service.test_ranking import result

pytestmark = pytest.mark.django_db


@pytest.fixture
def systems() -> tuple[Site, list[System]]:
    site = Site(name="Stored", country="FR")
    site.save()
    return site, [System.objects.create(site=site, accelerator_model="cpu", identity=f"s{i}") for i in range(3)]


def api_ranks(client: Client, query: str = "") -> dict[int, int]:
    rows = client.get(f"/api/v1/leaderboard/{query}").json()["results"]
    return {row["id"]: row["rank"] for row in rows}


def test_listed_is_the_live_list_through_publish_withdraw_and_review(systems):
    site, (s1, s2, _) = systems
    a, b = result(site, s1, "open", 3.0), result(site, s2, "open", 2.0, published=False)
    ranking.rerank()
    assert set(Result.objects.listed()) == set(Result.objects.live()) == {a}
    Result.objects.filter(pk=b.pk).update(published=True)  # verified, waiting for the admin's approval
    pipeline.publish(b.submission)
    assert set(Result.objects.listed()) == set(Result.objects.live()) == {a, b}
    pipeline.withdraw(a.submission)
    assert set(Result.objects.listed()) == set(Result.objects.live()) == {b}
    Result.objects.filter(pk=b.pk).update(review=Result.Review.PENDING)
    ranking.rerank()
    assert not Result.objects.listed().exists() and not Result.objects.live().exists()


def test_pages_follow_publish_withdraw_and_ties_at_once(systems):
    site, (s1, s2, s3) = systems
    top, tied, third = result(site, s1, "open", 5.0), result(site, s2, "open", 5.0), result(site, s3, "open", 1.0)
    ranking.rerank()
    client = Client()
    assert api_ranks(client) == {top.pk: 1, tied.pk: 1, third.pk: 3}  # equal scores share a rank
    assert f"/results/{third.pk}" in client.get("/?division=open").content.decode()
    pipeline.withdraw(top.submission)  # the cached list and API answer are dropped in the same transaction
    assert api_ranks(client) == {tied.pk: 1, third.pk: 2}
    assert client.get(f"/results/{top.pk}").status_code == 404  # off the list, in no edition
    pipeline.withdraw(third.submission)
    assert f"/results/{third.pk}" not in client.get("/?division=open").content.decode()
    late = result(site, s3, "open", 5.0, published=False)
    Result.objects.filter(pk=late.pk).update(published=True)  # verified, waiting for the admin's approval
    assert api_ranks(client) == {tied.pk: 1}
    pipeline.publish(late.submission)
    assert api_ranks(client) == {tied.pk: 1, late.pk: 1}
    assert api_ranks(client, "?all=1") == {tied.pk: 1, late.pk: 1}


def test_aiperf_rerank_repairs_a_change_behind_the_services_back(systems, capsys):
    site, (s1, s2, _) = systems
    low, high = result(site, s1, "official", 1.0), result(site, s2, "official", 2.0)
    ranking.rerank()
    call_command("aiperf_rerank", "--check")
    assert "0 differences" in capsys.readouterr().out
    client = Client()
    assert api_ranks(client) == {high.pk: 1, low.pk: 2}
    Result.objects.filter(pk=low.pk).update(score_ops=3.0)  # raw UPDATE: no rerank, no signal
    assert api_ranks(client) == {high.pk: 1, low.pk: 2}  # the cached answer (the stored ranks say the same)
    with pytest.raises(CommandError, match="4 stored rank"):
        call_command("aiperf_rerank", "--check")
    assert Result.objects.get(pk=low.pk).rank == 2  # --check changed nothing
    call_command("aiperf_rerank")
    assert api_ranks(client) == {low.pk: 1, high.pk: 2}
    signed_in = Client()  # a reader with a session: never served from (or stored in) the cache
    signed_in.cookies[settings.SESSION_COOKIE_NAME] = "a-session"
    Result.objects.filter(pk=high.pk).update(score_ops=9.0)
    ranking.rerank()
    assert api_ranks(signed_in) == api_ranks(client) == {high.pk: 1, low.pk: 2}
