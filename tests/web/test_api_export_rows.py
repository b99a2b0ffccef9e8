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


@pytest.mark.parametrize("params", [{}, {"all": "1"}, {"edition": "newest"}, {"division": "open", "ordering": "-efficiency"},
                                    {"workload": "llm", "all": "1"}])
def test_the_ranked_lists_export_is_the_pages_rows(client, demo_data, settings, params):
    """The whole-list export of the leaderboard and of results (exports.leaderboard_rows, from values()) writes
    the rows the serializer writes, in the list's order; and the API's ?format=json answers them."""
    from leaderboard.api import exports

    settings.AIPERF_PAGE_CACHE_S = 0
    demo_data(40, llm_results=4)
    if params.get("edition") == "newest":
        params = {"edition": Edition.objects.public().order_by("-name").values_list("name", flat=True).first()}
    view = LeaderboardViewSet(request=Request(APIRequestFactory().get("/api/v1/leaderboard/", params)),
                              format_kwarg=None, action="list", kwargs={})
    queryset = view.filter_queryset(view.get_queryset())
    serializer = s.LeaderboardEntrySerializer(context={"request": view.request})
    rows = exports.leaderboard_rows(queryset, view.request)
    expected = [serializer.to_representation(result) for result in queryset]
    assert len(rows) > 3 and rows == expected
    assert all(list(a) == list(b) and [type(v) for v in a.values()] == [type(v) for v in b.values()]
               for a, b in zip(rows, expected, strict=True))
    for url in ("/api/v1/leaderboard/", "/api/v1/results/"):
        assert client.get(url, {**params, "format": "json"}).json() == rows


def test_failed_checks_stored_beside_the_report_are_the_reports(client, demo_data, settings):
    """`not_official_because` of the submissions' list reads the failed checks each Result keeps beside its report
    (Result.failed_checks, set by save() and by the demo's bulk insert): the same as reading the whole report."""
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
        result = by_result[row["result"]]
        assert result.failed_checks == [c for c in result.report["checks"] if not c["passed"]]
        assert row["not_official_because"] == standing.not_official_because(result), row["id"]
        compared += bool(row["not_official_because"])
    assert compared > 5  # open results fail checks (preset, duration): compared for real


@pytest.mark.parametrize("token", [False, True])
def test_the_submissions_export_is_the_pages_rows(client, demo_data, settings, token):
    """The whole-list export (exports.submission_rows, from values()) writes the rows a page writes, as JSON and as
    CSV, for anyone and for the submitting site; and its CSV is the renderer's CSV of those rows."""
    from leaderboard.api.renderers import CSVRenderer
    from leaderboard.models import Submission

    settings.AIPERF_PAGE_CACHE_S = 0
    demo_data(40)
    refused = Submission.objects.filter(result=None).order_by("pk").first() or Submission.objects.first()
    Submission.objects.filter(pk=refused.pk).update(reasons=[{"check": "integrity.chain", "message": "line 9"}])
    site = refused.site
    headers = {"HTTP_AUTHORIZATION": f"Token {site.new_token()}"} if token else {}
    site.save()
    pages, page = [], 1
    while True:
        answer = client.get("/api/v1/submissions/", {"page": page, "page_size": 1000}, **headers).json()
        pages += answer["results"]
        if not answer["next"]:
            break
        page += 1
    exported = client.get("/api/v1/submissions/", {"format": "json"}, **headers).json()
    assert len(exported) == len(pages) > 30
    assert exported == pages
    csv = client.get("/api/v1/submissions/", {"format": "csv"}, **headers).content
    assert csv == CSVRenderer().render(pages)
    assert b"standing.state" in csv.splitlines()[0]
    reasons = next(row["reasons"] for row in exported if row["id"] == refused.pk)
    assert reasons == [{"check": "integrity.chain", "message": "line 9" if token else s.PRIVATE_MESSAGE}]


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
