"""A run is verified under the rules version it declares, and only the list's admitted versions rank officially:
a stored run of the runner of 1 December (rules 1.0) is accepted with its own figures and listed in the open
division, its `validity.admitted` saying why; an edition records the versions it admitted."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from aiperf_runner.spec import keys

from leaderboard import pipeline, ranking
from leaderboard.models import Edition, LogEntry, Result, Submission
from tests.service.conftest import new_site, upload

STORED = Path(__file__).parents[1] / "fixtures" / "runs"
pytestmark = pytest.mark.django_db(transaction=True)


def _submit_stored(name: str) -> Result:
    from leaderboard.models import SiteKey

    fixture = new_site(f"Lab {name}", register_key=False)
    public = keys.load_public_key(STORED / name / "site_key.pub")
    SiteKey.objects.create(site=fixture.site, public_key=base64.b64encode(keys.public_bytes(public)).decode(),
                           fingerprint=keys.fingerprint(public))
    response = upload(fixture.client, STORED / name / "run.tar.gz")
    assert response.status_code in (201, 202), response.content
    sub = Submission.objects.get(pk=response.json()["id"])
    assert sub.status == Submission.Status.VERIFIED, sub.reasons
    return sub.result


def _check(result: Result, name: str) -> dict:
    return next(c for c in result.report["checks"] if c["name"] == name)


def test_a_rules_1_0_run_is_verified_under_its_rules_and_listed_open() -> None:
    expected = json.loads((STORED / "spec1-rules1.0" / "expected.json").read_text())["report"]
    result = _submit_stored("spec1-rules1.0")
    assert (result.rules_version, result.spec_version) == ("1.0", "1")
    assert result.submission.rules_version == "1.0"
    assert result.score_ops == expected["score_ops"] and result.division == "open"
    admitted = _check(result, "validity.admitted")
    assert not admitted["passed"] and admitted["measured"] == "1.0" and admitted["threshold"] == ["3.1"]
    assert "not admitted to this list's official ranking (it admits 3.1)" in admitted["message"]
    assert not any(c["name"].startswith(("system.", "witness.")) for c in result.report["checks"])
    # A re-verification keeps the version it was verified under.
    assert pipeline.run(result.submission_id, reverify=True).status == Submission.Status.VERIFIED
    assert Result.objects.get(pk=result.pk).rules_version == "1.0"


def test_admitted_versions_are_the_lists_and_an_edition_records_them(settings) -> None:
    settings.AIPERF_OFFICIAL_RULES = ["2.0", "3.1"]
    result = _submit_stored("spec1-rules2.0")
    assert result.rules_version == "2.0" and _check(result, "validity.admitted")["passed"]
    edition = Edition.objects.create(name="2026-12")
    ranking.freeze_edition(edition)
    edition.refresh_from_db()
    assert edition.rules_versions == ["2.0", "3.1"]
    frozen = LogEntry.objects.order_by("-index").first()
    assert frozen is not None and json.loads(frozen.data)["edition"]["rules_versions"] == ["2.0", "3.1"]


def test_the_list_marks_a_result_of_rules_it_does_not_admit(client) -> None:
    result = _submit_stored("spec1-rules1.0")
    Result.objects.filter(pk=result.pk).update(published=True)
    ranking.rerank()
    page = client.get("/?division=open").content.decode()
    row = next(line for line in page.splitlines() if f'data-result="{result.pk}"' in line)
    assert 'class="tag tag-rules"' in row and "rules 1.0" in row
