"""Uploading a bundle: accepted, stored with its digest, verified in-process, idempotent."""

from __future__ import annotations

import hashlib

from aiperf_runner.spec.verify import verify

from leaderboard.models import Result, Submission, Trial
from tests.service.conftest import nothing_left, upload


def test_upload_is_verified_and_ranked(site_a, make_bundle, media_root):
    path = make_bundle(site_a.key)
    resp = upload(site_a.client, path)
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["status"] == "verified"
    assert body["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert body["rank"] == 1
    assert body["url"].endswith(f"/results/{body['result']}")
    sub = Submission.objects.get(pk=body["id"])
    assert (media_root / sub.bundle.name).read_bytes() == path.read_bytes()
    result = Result.objects.get(submission=sub)
    report = verify(path, pubkey=site_a.key.public_key(), require_signature=True)
    assert result.score_ops == report["score_ops"] == body["score_ops"]
    assert result.regulated_score_ops == report["regulated_score_ops"]
    assert result.series.points == report["series"]
    assert result.published and result.division == report["division"]
    assert Trial.objects.filter(result=result).count() == report["trials_finished"]
    assert [p for p in nothing_left(media_root) if p.startswith("tmp/")] == []


def test_same_bundle_again_returns_the_existing_submission(site_a, make_bundle):
    path = make_bundle(site_a.key)
    first = upload(site_a.client, path)
    second = upload(site_a.client, path)
    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    assert Submission.objects.count() == 1 and Result.objects.count() == 1


def test_upload_needs_a_site_token(site_a, make_bundle):
    from rest_framework.test import APIClient

    path = make_bundle(site_a.key)
    assert upload(APIClient(), path).status_code in (401, 403)
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert upload(bad, path).status_code == 401
    assert Submission.objects.count() == 0


def test_upload_without_a_file(site_a):
    resp = site_a.client.post("/api/v1/submissions/", {}, format="multipart")
    assert resp.status_code == 400
    assert resp.json()["check"] == "request"
