"""The verification task: idempotent, claim-guarded, one Result whatever happens."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from leaderboard import pipeline
from leaderboard.models import Result, ResultSeries, Submission, Trial
from leaderboard.tasks import verify_submission
from tests.service.conftest import upload


@pytest.fixture
def received(site_a, make_bundle, monkeypatch):
    """A stored submission whose task has not run (as if the broker had not delivered it yet)."""
    monkeypatch.setattr("leaderboard.intake.enqueue", lambda pk: None)
    resp = upload(site_a.client, make_bundle(site_a.key))
    assert resp.status_code == 201 and resp.json()["status"] == "received"
    return Submission.objects.get(pk=resp.json()["id"])


def test_task_twice_gives_one_result(received):
    assert verify_submission.delay(received.pk).get() == "verified"
    assert verify_submission.delay(received.pk).get() == "skipped"
    assert Result.objects.count() == 1 and ResultSeries.objects.count() == 1
    received.refresh_from_db()
    assert received.status == "verified" and received.claim_token == "" and received.attempts == 1


def test_fresh_claim_of_another_worker_is_left_alone(received):
    token = pipeline.claim(received.pk)
    assert token
    outcome = pipeline.run(received.pk)
    assert outcome.status == "skipped" and outcome.busy_until is not None
    assert Result.objects.count() == 0


def test_stale_claim_of_a_dead_worker_is_taken_over(received, settings):
    assert pipeline.claim(received.pk)  # a worker claimed it, then died
    Submission.objects.filter(pk=received.pk).update(
        claimed_at=timezone.now() - timedelta(seconds=settings.AIPERF_CLAIM_TIMEOUT_S + 1))
    assert pipeline.run(received.pk).status == "verified"
    assert Result.objects.filter(submission=received).count() == 1
    assert Submission.objects.get(pk=received.pk).attempts == 2


def test_a_worker_whose_claim_was_taken_over_discards_its_work(received, monkeypatch):
    """The first worker stalls past the claim timeout; a second one takes over and finishes."""
    real = pipeline._verify

    def stall_then_lose(sub):
        stored = real(sub)
        Submission.objects.filter(pk=sub.pk).update(claim_token="someone-else")
        return stored

    monkeypatch.setattr(pipeline, "_verify", stall_then_lose)
    assert pipeline.run(received.pk).status == "skipped"
    assert Result.objects.count() == 0


def test_crash_before_the_final_transaction_leaves_no_rows_and_can_be_rerun(received, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("worker crashed")

    monkeypatch.setattr(Trial.objects, "bulk_create", boom)
    with pytest.raises(RuntimeError):
        pipeline.run(received.pk)
    assert Result.objects.count() == 0  # the transaction rolled back
    received.refresh_from_db()
    assert received.status == "received" and received.claim_token == ""  # released for a retry
    assert received.error == "RuntimeError: worker crashed"  # and says why
    monkeypatch.undo()
    assert pipeline.run(received.pk).status == "verified"
    assert Result.objects.count() == 1
    received.refresh_from_db()
    assert received.error == ""


def test_resume_stuck_removes_what_killed_workers_left(received, media_root, settings):
    from leaderboard.tasks import resume_stuck

    settings.AIPERF_TMP_MAX_AGE_S = 3600
    tmp = media_root / "tmp"
    old_dir, old_file, fresh = tmp / "extract-old", tmp / "upload-old.tar.gz", tmp / "extract-fresh"
    (old_dir / "run").mkdir(parents=True)
    (old_dir / "run" / "events.jsonl").write_text("{}\n")
    old_file.write_bytes(b"x")
    fresh.mkdir()
    two_hours_ago = time.time() - 7200
    for path in (old_dir, old_file):
        os.utime(path, (two_hours_ago, two_hours_ago))
    resume_stuck.delay().get()
    assert sorted(p.name for p in tmp.iterdir()) == ["extract-fresh"]
    assert Submission.objects.get(pk=received.pk).bundle.name  # stored bundles are not scratch


def test_reverify_updates_the_one_result(received, monkeypatch):
    pipeline.run(received.pk)
    result = Result.objects.get()
    Result.objects.filter(pk=result.pk).update(verifier_version="old", score_ops=1.0)
    assert list(pipeline.needs_reverify()) == [received]
    from django.core.management import call_command

    call_command("aiperf_reverify")
    again = Result.objects.get()
    assert again.pk == result.pk and again.verifier_version == pipeline.VERIFIER_VERSION
    assert again.score_ops == result.score_ops != 1.0
    assert Trial.objects.filter(result=again).count() == result.trials.count()
    assert list(pipeline.needs_reverify()) == []


def test_reverify_task_queues_stale_results(received):
    from leaderboard.tasks import resume_stuck, reverify_stale

    pipeline.run(received.pk)
    Result.objects.update(verifier_version="old")
    assert reverify_stale.delay().get() == 1
    assert Result.objects.get().verifier_version == pipeline.VERIFIER_VERSION
    assert resume_stuck.delay().get() == 0


def test_resume_stuck_requeues_an_orphan(received):
    from leaderboard.tasks import resume_stuck

    Submission.objects.filter(pk=received.pk).update(created_at=timezone.now() - timedelta(hours=1))
    assert resume_stuck.delay().get() == 1
    assert Submission.objects.get(pk=received.pk).status == "verified"


def test_key_revoked_before_verification(received):
    received.key.revoked_at = timezone.now()
    received.key.save()
    outcome = pipeline.run(received.pk)
    assert outcome.status == "rejected"
    assert outcome.reasons[0]["check"] == "integrity.key"
    received.refresh_from_db()
    assert received.status == "rejected" and not received.bundle
    assert Result.objects.count() == 0


def test_approval_required(site_a, make_bundle, settings):
    settings.AIPERF_REQUIRE_APPROVAL = True
    body = upload(site_a.client, make_bundle(site_a.key)).json()
    assert body["status"] == "verified" and body["rank"] is None
    assert site_a.client.get("/api/v1/leaderboard/").json()["count"] == 0
    sub = Submission.objects.get(pk=body["id"])
    assert pipeline.publish(sub)
    assert Submission.objects.get(pk=sub.pk).status == "published"
    board = site_a.client.get("/api/v1/leaderboard/").json()
    assert board["count"] == 1 and board["results"][0]["rank"] == 1
    assert pipeline.withdraw(sub)
    assert site_a.client.get("/api/v1/leaderboard/").json()["count"] == 0
    assert Submission.objects.get(pk=sub.pk).status == "withdrawn"
