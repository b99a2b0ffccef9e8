"""A run token asked of a service that cannot witness (no witness key): 503 with the check named,
and nothing of the server's files in the answer; the reason, path included, goes to the server's log."""

from __future__ import annotations

import logging

import pytest

from leaderboard.models import RunAttempt, System
from tests.service.conftest import SiteFixture

pytestmark = pytest.mark.django_db


def test_no_witness_key_is_503_without_the_servers_path(site_a: SiteFixture, settings, tmp_path, caplog) -> None:
    missing = tmp_path / "keys" / "witness_key.pem"
    settings.AIPERF_WITNESS_KEY_FILE = str(missing)
    system = System.objects.create(site=site_a.site, accelerator_model="cpu", identity="w", registered=True)
    with caplog.at_level(logging.ERROR, logger="leaderboard.api.views"):
        resp = site_a.client.post("/api/v1/runs/", {"system": system.pk, "preset": "smoke", "rules": "v2",
                                                    "precision": "fp32", "slots": 1, "devices_per_slot": 1,
                                                    "duration_s": 60.0, "runner_version": "test"}, format="json")
    assert resp.status_code == 503, resp.content
    body = resp.json()
    assert body["check"] == "witness" and "witness key" in body["detail"]
    assert str(tmp_path) not in resp.content.decode()
    assert str(missing) in caplog.text  # the maintainers learn where it was looked for
    assert not RunAttempt.objects.exists()
