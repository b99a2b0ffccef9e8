"""Writes refuse the fields they do not take, each named, and keep nothing: a misspelt optional field
(`rehersal`) would otherwise be dropped and its default used without a word."""

from __future__ import annotations

import io

import pytest

from leaderboard.models import RunAttempt, SiteKey, Submission, System
from tests.service.conftest import SiteFixture, nothing_left

pytestmark = pytest.mark.django_db

RUN = {"preset": "smoke", "rules": "v2", "precision": "fp32", "slots": 1, "devices_per_slot": 1,
       "duration_s": 60.0, "runner_version": "test"}


def refused_for(resp, *names: str) -> dict:
    assert resp.status_code == 400, resp.content
    body = resp.json()
    for name in names:
        assert "unknown field" in str(body.get(name) or body.get("detail")), body
    return body


def test_a_system_with_a_misspelt_field(site_a: SiteFixture) -> None:
    resp = site_a.client.post("/api/v1/systems/", {"name": "x", "accelerator_model": "cpu", "accelerators_per_node": 0,
                                                   "nodes": 1, "cpu_modle": "Xeon"}, format="json")
    refused_for(resp, "cpu_modle")
    assert not System.objects.exists()


def test_a_run_token_with_a_misspelt_rehearsal(site_a: SiteFixture, settings, tmp_path) -> None:
    settings.AIPERF_WITNESS_KEY_FILE = str(tmp_path / "witness_key.pem")
    system = System.objects.create(site=site_a.site, accelerator_model="cpu", identity="u", registered=True)
    resp = site_a.client.post("/api/v1/runs/", {**RUN, "system": system.pk, "rehersal": True}, format="json")
    refused_for(resp, "rehersal")
    assert not RunAttempt.objects.exists()


def test_a_key_with_a_field_it_does_not_take(site_a: SiteFixture) -> None:
    from aiperf_runner.spec import keys

    resp = site_a.client.post("/api/v1/keys/", {"public_key": keys.public_line(keys.generate_key()), "owner": "me"},
                              format="json")
    refused_for(resp, "owner")
    assert SiteKey.objects.filter(site=site_a.site).count() == 1  # the fixture's own


def test_an_upload_with_a_misspelt_rehearsal(site_a: SiteFixture, make_bundle, media_root) -> None:
    files = nothing_left(media_root)
    fh = io.BytesIO(make_bundle(site_a.key).read_bytes())
    fh.name = "bundle.tar.gz"
    resp = site_a.client.post("/api/v1/submissions/", {"bundle": fh, "rehersal": "true"}, format="multipart")
    body = refused_for(resp, "rehersal")
    assert body["check"] == "request"
    assert not Submission.objects.exists() and nothing_left(media_root) == files
