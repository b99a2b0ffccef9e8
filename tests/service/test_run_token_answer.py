"""A run token's answer names the witness key that signed it, fingerprint and public half, as its schema says: the
runner keeps it (local/witness.json) so that the site's own `verify` checks the receipts as the service will. It
is the key `/api/v1/witness/` lists as current, and it verifies the token's signature."""

from __future__ import annotations

import base64

import pytest
from aiperf_runner.spec import keys as spec_keys
from aiperf_runner.spec import witness as spec_witness

from leaderboard import witness
from leaderboard.models import System
from tests.service.conftest import SiteFixture

pytestmark = pytest.mark.django_db

FIELDS = {"preset": "smoke", "rules": "v2", "precision": "fp32", "slots": 1, "devices_per_slot": 1,
          "duration_s": 60.0, "runner_version": "test"}


def test_the_answer_names_the_key_that_signed_the_token(site_a: SiteFixture, settings, tmp_path) -> None:
    settings.AIPERF_WITNESS_KEY_FILE = str(tmp_path / "witness_key.pem")
    witness.create_key()
    system = System.objects.create(site=site_a.site, accelerator_model="cpu", identity="t", registered=True)
    resp = site_a.client.post("/api/v1/runs/", {"system": system.pk, **FIELDS}, format="json")
    assert resp.status_code == 201, resp.content
    named = resp.json()["witness"]
    current = site_a.client.get("/api/v1/witness/").json()
    assert named == {"fingerprint": current["fingerprint"], "public_key": current["public_key"]}
    raw = base64.b64decode(named["public_key"])
    assert spec_keys.fingerprint(raw) == named["fingerprint"]
    token = resp.json()["token"]
    assert spec_witness.signature_problem(token["statement"], token["signature"], {named["fingerprint"]: raw}) is None
