"""What of a refusal is public: anyone sees that a site's submission was rejected and which checks failed;
only the site itself (its token) sees the messages, which quote its run, hardware and figures, and a
service fault's `error`."""

from __future__ import annotations

import secrets

from rest_framework.test import APIClient

from leaderboard.api.serializers import PRIVATE_MESSAGE
from leaderboard.models import Submission
from tests.service.conftest import new_site


def rejected(site) -> Submission:
    return Submission.objects.create(
        site=site.site, sha256=secrets.token_hex(32), size=1000, run_id=secrets.token_hex(16),
        status=Submission.Status.REJECTED, error="disk full at /srv/aiperf/media/bundles",
        reasons=[{"check": "system.facts", "message": "the trials ran on 2 x Intel Xeon; the registration is 8 x H200"}])


def test_a_refusal_is_public_as_a_fact_and_private_in_its_words(db):
    owner, other = new_site("Owner Lab"), new_site("Other Lab")
    sub = rejected(owner)
    for viewer in (APIClient(), other.client):
        seen = viewer.get(f"/api/v1/submissions/{sub.pk}/").json()
        assert seen["status"] == "rejected" and seen["site"]["name"] == "Owner Lab"
        assert seen["reasons"] == [{"check": "system.facts", "message": PRIVATE_MESSAGE}], seen["reasons"]
        assert seen["error"] == ""
        listed = viewer.get("/api/v1/submissions/", {"site": "Owner Lab"}).json()["results"]
        assert "Xeon" not in str(listed) and "/srv/" not in str(listed)
        csv = viewer.get("/api/v1/submissions/?format=csv").content.decode()
        assert "Xeon" not in csv and "/srv/" not in csv
    mine = owner.client.get(f"/api/v1/submissions/{sub.pk}/").json()
    assert "8 x H200" in mine["reasons"][0]["message"] and mine["error"].startswith("disk full")
