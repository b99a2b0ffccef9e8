"""Rehearsals (docs/service.md, "Rehearsals"): a run on a rehearsal token is submitted as a rehearsal only,
shown to its own site only, never on any list, never published by a maintainer, and counted apart on
the system's record. The whole path with a real witnessed run is in test_e2e_trust.py."""

from __future__ import annotations

import pytest
from django.test import Client

from leaderboard import intake, pipeline, ranking, witness
from leaderboard.attempts import attempt_counts
from leaderboard.errors import Rejected
from leaderboard.models import Result, RunAttempt, Site, Submission, System
from tests.service.test_ranking import result

pytestmark = pytest.mark.django_db

FIELDS = {"preset": "smoke", "rules": "v2", "precision": "fp32", "slots": 1, "devices_per_slot": 1,
          "duration_s": 60.0, "runner_version": "test"}


@pytest.fixture
def site_system(settings, tmp_path) -> tuple[Site, System]:
    settings.AIPERF_WITNESS_KEY_FILE = str(tmp_path / "witness_key.pem")
    witness.create_key()
    site = Site(name="Rehearsing", country="NL")
    site.save()
    return site, System.objects.create(site=site, accelerator_model="cpu", identity="r", registered=True)


def rehearsed(site: Site, system: System, score: float) -> Result:
    """A verified result whose submission went in as a rehearsal."""
    r = result(site, system, "official", score)
    Submission.objects.filter(pk=r.submission_id).update(rehearsal=True)
    return Result.objects.get(pk=r.pk)


def test_a_rehearsal_token_says_so_in_its_signed_statement(site_system):
    attempt = witness.issue_token(*site_system, FIELDS, rehearsal=True)
    assert attempt.rehearsal and attempt.statement["rehearsal"] is True
    plain = witness.issue_token(*site_system, FIELDS)
    assert not plain.rehearsal and "rehearsal" not in plain.statement


def test_a_rehearsal_goes_in_as_one_and_only_a_rehearsal_does(site_system):
    rehearsal = witness.issue_token(*site_system, FIELDS, rehearsal=True)
    plain = witness.issue_token(*site_system, FIELDS)
    with pytest.raises(Rejected) as refused:
        intake.check_rehearsal(rehearsal.run_id, False)
    assert refused.value.reasons[0]["check"] == "rehearsal"
    assert "cannot be submitted for the list" in str(refused.value) and "--rehearsal" in str(refused.value)
    with pytest.raises(Rejected) as refused:
        intake.check_rehearsal(plain.run_id, True)
    assert "did not run on a rehearsal token" in str(refused.value)
    with pytest.raises(Rejected):
        intake.check_rehearsal("f" * 32, True)  # an unwitnessed run has no rehearsal token either
    intake.check_rehearsal(rehearsal.run_id, True)
    intake.check_rehearsal(plain.run_id, False)


def test_a_rehearsal_is_never_on_the_list_and_never_published(site_system):
    site, system = site_system
    listed, private = result(site, system, "official", 1.0), rehearsed(site, system, 5.0)
    ranking.rerank()
    assert set(Result.objects.live()) == set(Result.objects.listed()) == {listed}
    assert Result.objects.get(pk=private.pk).rank is None
    assert not pipeline.publish(private.submission)  # a maintainer's approval cannot list it either
    assert set(Result.objects.live()) == {listed}
    rows = Client().get("/api/v1/leaderboard/?all=1").json()["results"]
    assert [row["id"] for row in rows] == [listed.pk]


def test_a_rehearsal_is_shown_to_its_site_only(site_system):
    site, system = site_system
    token = site.new_token()
    site.save()
    private = rehearsed(site, system, 5.0)
    ranking.rerank()
    anonymous = Client()
    assert anonymous.get(f"/api/v1/submissions/{private.submission_id}/").status_code == 404
    assert anonymous.get(f"/api/v1/results/{private.pk}/").status_code == 404
    assert anonymous.get(f"/results/{private.pk}/").status_code == 404
    assert private.submission_id not in [s["id"] for s in anonymous.get("/api/v1/submissions/").json()["results"]]
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    mine = anonymous.get(f"/api/v1/submissions/{private.submission_id}/", **auth).json()
    assert mine["rehearsal"] is True and mine["url"] is None and mine["rank"] is None
    assert anonymous.get(f"/api/v1/results/{private.pk}/", **auth).status_code == 200


def test_rehearsals_are_counted_apart_on_the_systems_record(site_system):
    site, system = site_system
    witness.issue_token(site, system, FIELDS)
    rehearsal = witness.issue_token(site, system, FIELDS, rehearsal=True)
    sub = Submission.objects.create(site=site, sha256="e" * 64, size=1, run_id=rehearsal.run_id,
                                    status=Submission.Status.VERIFIED, rehearsal=True)
    RunAttempt.objects.filter(pk=rehearsal.pk).update(submission=sub)
    counts = attempt_counts(system)
    assert (counts["attempted"], counts["submitted"], counts["verified"]) == (1, 0, 0)
    assert (counts["rehearsals"], counts["rehearsals_verified"]) == (1, 1)
    api = Client().get(f"/api/v1/systems/{system.pk}/").json()
    assert (api["runs_attempted"], api["rehearsals"], api["rehearsals_verified"]) == (1, 1, 1)
    assert "Rehearsals (private, never ranked) / verified" in Client().get(f"/systems/{system.pk}/").content.decode()
