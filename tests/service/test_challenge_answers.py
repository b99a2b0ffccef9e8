"""Each upload that answers a challenge is answered with the submission as it now stands: the weights and states
just received among `evidence` and `states_received` (the view's prefetched lists were once kept from before the
upload, so the last file sent was missing from the answer), and an AIPerf-LLM trial's files asked for by `path`."""

from __future__ import annotations

import hashlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from leaderboard.models import Result

WEIGHTS = {"t0001": b"weights one", "t0002": b"weights two"}
MOMENTS = b"moments of t0001"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def challenged(db, monkeypatch):
    """A demo result challenged for two trials' weights and drawn for re-execution: t0002, a child of t0001."""
    from devdata import demo
    from leaderboard import tasks

    monkeypatch.setattr(tasks, "enqueue_audit", lambda pk: None)  # the audit itself is another test's
    demo.generate(3)
    result = Result.objects.order_by("pk").first()
    kept = {t: {"sha256": sha(w), "val_loss": 1.0} for t, w in WEIGHTS.items()}
    Result.objects.filter(pk=result.pk).update(audit=Result.Audit.PENDING, report={"kept_weights": kept})
    sub = result.submission
    sub.challenge = sorted(WEIGHTS)
    sub.proof = {"reexecute": [{"trial": "t0002", "parent": "t0001", "weights": sha(WEIGHTS["t0002"]),
                                "parent_weights": sha(WEIGHTS["t0001"]), "parent_optimizer": sha(MOMENTS)}],
                 "of": 2, "finished": 2}
    sub.save(update_fields=["challenge", "proof"])
    token = sub.site.new_token()
    sub.site.save()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return sub, client


def test_every_answer_lists_the_file_it_received(challenged) -> None:
    sub, client = challenged
    url = f"/api/v1/submissions/{sub.pk}/"
    for n, (trial, data) in enumerate(sorted(WEIGHTS.items()), start=1):
        r = client.post(url + "evidence/", {"trial": trial, "weights": SimpleUploadedFile("w.safetensors", data)})
        assert r.status_code == 201, r.content
        assert r.json()["evidence"] == sorted(WEIGHTS)[:n]
    r = client.post(url + "states/", {"sha256": sha(MOMENTS), "state": SimpleUploadedFile("o.safetensors", MOMENTS)})
    assert r.status_code == 201, r.content
    assert r.json()["states_received"] == [sha(MOMENTS)]


def test_an_llm_trials_files_are_asked_for_by_their_path(challenged) -> None:
    sub, client = challenged
    states = {s["sha256"]: s for s in client.get(f"/api/v1/submissions/{sub.pk}/").json()["states"]}
    assert states[sha(WEIGHTS["t0002"])]["path"] == "trials/t0002/weights.safetensors"
    assert states[sha(WEIGHTS["t0001"])]["path"] == "trials/t0001/weights.safetensors"
    assert states[sha(MOMENTS)] == {"trial": "t0001", "sha256": sha(MOMENTS),
                                    "path": "trials/t0001/optimizer.safetensors"}
    r = client.post(f"/api/v1/submissions/{sub.pk}/states/",
                    {"sha256": sha(b"other"), "state": SimpleUploadedFile("x.safetensors", b"other")})
    assert r.status_code == 404 and r.json()["check"] == "evidence"
