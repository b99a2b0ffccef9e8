"""A list row of the API (LeaderboardEntrySerializer) is written out directly for speed: it must be the dict DRF's
own field-by-field serialization makes, key for key and value for value, on every row of the live list, of an
edition, and of every result (`all=1`)."""

from __future__ import annotations

import pytest
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from leaderboard.api import serializers as s
from leaderboard.api.views import LeaderboardViewSet
from leaderboard.models import Edition

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("params", [{}, {"all": "1"}, {"edition": "newest"}, {"division": "open"}])
def test_a_row_written_directly_is_drfs_row(demo_data, params):
    demo_data(40)
    if params.get("edition") == "newest":
        params = {"edition": Edition.objects.public().order_by("-name").values_list("name", flat=True).first()}
    view = LeaderboardViewSet(request=Request(APIRequestFactory().get("/api/v1/leaderboard/", params)),
                              format_kwarg=None, action="list", kwargs={})
    rows = list(view.filter_queryset(view.get_queryset()))
    assert len(rows) > 5
    serializer = s.LeaderboardEntrySerializer(context={"request": view.request})
    for result in rows:
        fast = serializer.to_representation(result)
        drf = serializers.ModelSerializer.to_representation(serializer, result)
        assert list(fast) == list(drf) and fast == drf, (result.pk, fast, dict(drf))
        assert {type(v) for v in fast.values()} == {type(v) for v in drf.values()}


def test_failed_checks_picked_by_the_database_are_the_reports(client, demo_data, settings):
    """`not_official_because` of the submissions' list reads the checks the database picks out of each report
    (standing.FailedChecks): the same as reading the whole report."""
    from leaderboard import standing
    from leaderboard.models import Result

    settings.AIPERF_PAGE_CACHE_S = 0
    demo_data(40)
    rows = client.get("/api/v1/submissions/", {"format": "json"}).json()
    by_result = {r.pk: r for r in Result.objects.all()}
    compared = 0
    for row in rows:
        if row["result"] is None:
            continue
        expected = standing.not_official_because(by_result[row["result"]])
        assert row["not_official_because"] == expected, row["id"]
        compared += bool(expected)
    assert compared > 5  # open results fail checks (preset, duration): compared for real


@pytest.mark.parametrize("token", [False, True])
def test_a_submission_row_written_directly_is_drfs_row(demo_data, token):
    """The submissions' list row (SubmissionSerializer._row) is the dict of DRF's own fields, seen by anyone and
    by the submitting site (whose reasons and errors are not hidden)."""
    from leaderboard.api.views import SubmissionViewSet

    demo_data(40)
    view = SubmissionViewSet(request=Request(APIRequestFactory().get("/api/v1/submissions/")), format_kwarg=None,
                             action="list", kwargs={})
    subs = list(view.filter_queryset(view.get_queryset()))
    assert len(subs) > 5
    compared = 0
    for sub in subs:
        context = {"request": view.request} if not token else {}  # no request: the site's own view
        serializer = s.SubmissionSerializer(subs, many=True, context=context).child
        fast = serializer.to_representation(sub)
        drf = serializers.ModelSerializer.to_representation(serializer, sub)
        if not token:
            drf["reasons"] = [{"check": r.get("check", ""), "message": s.PRIVATE_MESSAGE} for r in drf["reasons"]]
            drf["error"] = ""
        assert list(fast) == list(drf) and fast == drf, (sub.pk, fast, dict(drf))
        assert {type(v) for v in fast.values()} == {type(v) for v in drf.values()}
        compared += bool(fast["not_official_because"]) + bool(fast["reasons"])
    assert compared > 5
