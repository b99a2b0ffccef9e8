"""Trust on every result: the trust line (registered, witnessed, audited, reviewed) on the list, the result page,
the downloads and the API, and a banner that says where a result really stands, with its date and reason."""

from __future__ import annotations

import csv
import html
import io

import pytest

from leaderboard import pipeline, ranking
from leaderboard.models import Result, System

pytestmark = pytest.mark.django_db


def _official(demo_data) -> Result:
    demo_data(20)
    r = Result.objects.entries().filter(division="official").order_by("-score_ops").first()
    assert r is not None
    return r


def _page(client, r: Result) -> str:
    response = client.get(f"/results/{r.pk}")
    assert response.status_code == 200
    return response.content.decode()


def test_the_trust_line_is_on_the_page_the_list_the_downloads_and_the_api(client, demo_data):
    r = _official(demo_data)
    System.objects.filter(pk=r.system_id).update(registered=True, status=System.Status.APPROVED)
    Result.objects.filter(pk=r.pk).update(witnessed=True, audit=Result.Audit.PASSED)
    page = _page(client, r)
    assert '<li class="trust-ok"><span class="visually-hidden">system: </span>registered</li>' in page
    assert "witnessed</li>" in page and "audited</li>" in page and "no review needed</li>" in page
    assert f"Rank {r.rank} in the official division of the live list." in page

    row = next(line for line in client.get("/").content.decode().splitlines() if f'data-result="{r.pk}"' in line)
    assert 'title="system registered and approved">R' in row and 'title="run witnessed by the service">W' in row
    assert 'title="audit of the work: passed">A' in row

    exported = {int(x["result_id"]): x for x in csv.DictReader(io.StringIO(client.get("/?format=csv").content.decode()))}
    assert {k: exported[r.pk][k] for k in ("registered", "witnessed", "audit", "review")} == {
        "registered": "True", "witnessed": "True", "audit": "passed", "review": "not needed"}
    entry = next(e for e in client.get("/api/v1/leaderboard/").json()["results"] if e["id"] == r.pk)
    assert entry["trust"] == {"registered": True, "witnessed": True, "audit": "passed", "review": "not needed"}
    detail = client.get(f"/api/v1/results/{r.pk}/").json()
    assert detail["standing"]["state"] == "live" and detail["not_official_because"] == []


def test_an_unregistered_unwitnessed_result_says_so(client, demo_data):
    demo_data(20)
    r = Result.objects.entries().filter(division="open").first()
    System.objects.filter(pk=r.system_id).update(registered=False, status=System.Status.UNREGISTERED)
    Result.objects.filter(pk=r.pk).update(witnessed=False, audit=Result.Audit.NONE)
    page = _page(client, r)
    assert '<li class="trust-no"><span class="visually-hidden">system: </span>unregistered</li>' in page
    assert "unwitnessed</li>" in page and "not audited</li>" in page


@pytest.mark.parametrize("state,change,words", [
    ("review_pending", {"review": Result.Review.PENDING, "review_reason": "efficiency 70% of peak"},
     "In review by a list maintainer since "),
    ("review_rejected", {"review": Result.Review.REJECTED, "review_reason": "not this machine's figures",
                         "reviewed_by": "maint"}, "Refused by a list maintainer's review on "),
    ("audit_pending", {"audit": Result.Audit.PENDING}, "Waiting for its audit since "),
])
def test_a_result_off_the_list_says_why_with_its_date(client, demo_data, state, change, words):
    r = _official(demo_data)
    Result.objects.filter(pk=r.pk).update(**change)
    ranking.rerank()
    page = html.unescape(_page(client, r))
    assert f"standing-{state}" in page and words in page
    for value in change.values():
        if isinstance(value, str) and " " in value:
            assert value in page
    because = client.get(f"/api/v1/results/{r.pk}/").json()["not_official_because"]
    assert because[-1]["check"] == f"list.{state}" and words in because[-1]["message"]


def test_a_withdrawn_result_gives_its_date_who_and_why(client, demo_data):
    r = _official(demo_data)
    from leaderboard.models import Edition, EditionEntry

    ed = Edition.objects.create(name="trust-ed", frozen_at=r.verified_at)
    EditionEntry.objects.create(edition=ed, result=r, division=r.division, rank=1, score_ops=r.score_ops,
                                regulated_score_ops=r.regulated_score_ops)
    assert pipeline.withdraw(r.submission, by="maint", reason="the site asked: a misconfigured node")
    page = html.unescape(_page(client, r))
    assert "standing-withdrawn" in page and " by maint: the site asked: a misconfigured node." in page


def test_a_live_result_that_is_not_its_systems_best_says_which_is(client, demo_data):
    demo_data(60)
    r = Result.objects.live().filter(rank=None).exclude(rank_all=None).first()
    assert r is not None, "the demo data has a system with two live results"
    best = Result.objects.exclude(rank=None).get(system_id=r.system_id, division=r.division, rules=r.rules)
    page = html.unescape(_page(client, r))
    assert "not its system's best result" in page and f"result #{best.pk} (rank {best.rank})" in page
    assert "Rank None" not in page
    system_page = client.get(f"/systems/{r.system_id}").content.decode()
    assert "None" not in system_page.split("<tbody>")[1].split("</tbody>")[0]


def test_a_demo_result_says_its_audit_had_nothing_to_audit(client, demo_data):
    """A generated demo result was never audited (no work exists behind its figures): its trust line, list mark,
    audit rows and API say `demo`, neither passed nor failed."""
    r = _official(demo_data)
    assert r.audit == Result.Audit.DEMO
    page = _page(client, r)
    assert 'class="trust-neutral"><span class="visually-hidden">work: </span>demo data: nothing to audit</li>' in page
    assert "audited</li>" not in page
    assert "none to re-execute: generated demo data has no committed training states" in page
    row = next(line for line in client.get("/").content.decode().splitlines() if f'data-result="{r.pk}"' in line)
    assert 'class="trust-neutral" title="audit of the work: demo data, nothing to audit">A' in row
    entry = next(e for e in client.get("/api/v1/leaderboard/").json()["results"] if e["id"] == r.pk)
    assert entry["trust"]["audit"] == "demo"


def test_an_open_llm_result_says_its_preset_is_not_official(client, demo_data, settings):
    """AIPerf-LLM's division takes the preset, which no check of its report measures: an llm-smoke result with every
    check passed is open, and the API and the submissions' export say why (it said nothing: `[]`)."""
    settings.AIPERF_PAGE_CACHE_S = 0
    r = _official(demo_data)
    Result.objects.filter(pk=r.pk).update(workload="llm", rules="llm-v1", rules_version="llm-v1", preset="llm-smoke",
                                          division="open", best_loss=1.1)  # as the service stores an LLM result
    ranking.rerank()
    expected = [{"check": "validity.preset", "message": "preset 'llm-smoke': only 'llm-kjv' is official in AIPerf-LLM"}]
    assert client.get(f"/api/v1/results/{r.pk}/").json()["not_official_because"] == expected
    rows = client.get("/api/v1/submissions/", {"format": "json"}).json()
    assert next(row for row in rows if row["result"] == r.pk)["not_official_because"] == expected
    Result.objects.filter(pk=r.pk).update(preset="llm-kjv", division="official")
    ranking.rerank()
    assert client.get(f"/api/v1/results/{r.pk}/").json()["not_official_because"] == []
