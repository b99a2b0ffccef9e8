"""Onboarding: a centre applies at /apply with its contact and systems; a list maintainer approves it in the
admin, which makes the site and shows its API token once; the token signs the centre's people in."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache

from leaderboard.models import Application, Site
from leaderboard.site import apply

pytestmark = pytest.mark.django_db

FORM = {"centre": "Example Supercomputing Centre", "country": "de", "url": "https://example.org",
        "contact_name": "A. Operator", "contact_email": "ops@example.org",
        "systems": "64 nodes, 4 x H100 each, InfiniBand NDR", "message": "We would like to join the June list."}


def test_a_centre_applies_and_a_maintainer_approves_it(client):
    cache.clear()
    page = client.get("/apply").content.decode()
    assert 'name="contact_email"' in page and 'name="systems"' in page
    response = client.post("/apply", FORM)
    assert response.status_code == 201 and "waits for a list maintainer" in response.content.decode()
    application = Application.objects.get()
    assert (application.status, application.country, application.site) == ("pending", "DE", None)
    assert not Site.objects.exists()

    maintainer = User.objects.create_superuser("maint", "m@example.org", "pw-for-the-test")
    admin = type(client)()
    admin.force_login(maintainer)
    response = admin.post("/admin/leaderboard/application/", {"action": "approve",
                                                             "_selected_action": [application.pk]}, follow=True)
    shown = re.search(r"shown this once, for ops@example.org: ([\w-]+)", response.content.decode())
    assert shown, "the token is shown to the maintainer once"
    application.refresh_from_db()
    site = Site.objects.get(name=FORM["centre"])
    assert application.status == "approved" and application.site == site and application.decided_by == "maint"
    # The token works: the centre's people sign in to their site's page.
    assert client.post("/my-site/sign-in", {"token": shown.group(1)})["Location"] == "/my-site/"
    # Approving again makes nothing: the application is decided.
    admin.post("/admin/leaderboard/application/", {"action": "approve", "_selected_action": [application.pk]})
    assert Site.objects.count() == 1


def test_an_application_is_checked_and_says_what_is_wrong(client):
    cache.clear()
    response = client.post("/apply", {**FORM, "country": "Germany", "contact_email": "not an address"})
    page = response.content.decode()
    assert response.status_code == 400 and "two-letter ISO 3166-1 code" in page and "valid email" in page
    assert not Application.objects.exists()
    Site.objects.create(name=FORM["centre"], country="DE")
    assert "is on the list already" in client.post("/apply", FORM).content.decode()


def test_applications_are_limited_per_address(client):
    cache.clear()
    for i in range(apply.PER_ADDRESS):
        assert client.post("/apply", {**FORM, "centre": f"Centre {i}"}).status_code == 201
    assert client.post("/apply", {**FORM, "centre": "One too many"}).status_code == 429
    cache.clear()
