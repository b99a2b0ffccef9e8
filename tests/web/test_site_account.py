"""A site's own pages (`/my-site/`): signed in with the site's token, its people see every submission of the
site (refused ones with their reasons, verified ones with where they stand and why not official) and its runs in
progress; another site's never; nothing cached; failed sign-ins throttled per client address."""

from __future__ import annotations

import html

import pytest
from django.core.cache import cache

from leaderboard.models import Site, Submission


@pytest.fixture
def signed_in(client, real_result):
    result, _ = real_result
    site = result.site
    token = site.new_token()
    site.save()
    Submission.objects.create(site=site, sha256="b" * 64, size=10, run_id="c" * 32, status=Submission.Status.REJECTED,
                              reasons=[{"check": "integrity.signature", "message": "signed by another key"}])
    other = Site.objects.create(name="Another Site", country="FR")
    Submission.objects.create(site=other, sha256="d" * 64, size=10, run_id="e" * 32, status=Submission.Status.REJECTED,
                              reasons=[{"check": "integrity.chain", "message": "another site's secret"}])
    response = client.post("/my-site/sign-in", {"token": token})
    assert response.status_code == 302 and response["Location"] == "/my-site/"
    return result


def test_a_site_sees_every_submission_of_its_own_and_why(client, signed_in):
    result = signed_in
    response = client.get("/my-site/")
    page = html.unescape(response.content.decode())
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    assert f'data-submission="{result.submission_id}"' in page and f"result #{result.pk}" in page
    assert "Rank 1 in the open division of the live list." in page and "Not official because" in page
    assert "validity.preset" in page
    assert "Refused:" in page and "integrity.signature</code>: signed by another key" in page
    assert "another site's secret" not in page and "Another Site" not in page


def test_signed_out_it_asks_for_the_token_and_refuses_a_wrong_one(client, transactional_db):
    assert client.get("/my-site/")["Location"] == "/my-site/sign-in"
    response = client.post("/my-site/sign-in", {"token": "not-a-token"})
    assert response.status_code == 403 and "That is not a site" in response.content.decode()


def test_failed_sign_ins_are_throttled_per_address(client, transactional_db, settings):
    cache.clear()
    for _ in range(settings.AIPERF_FAILED_TOKENS):
        assert client.post("/my-site/sign-in", {"token": "guess"}).status_code == 403
    assert client.post("/my-site/sign-in", {"token": "guess"}).status_code == 429
    # The API counts the same guesses: a token tried there is refused before it is looked up.
    response = client.get("/api/v1/submissions/", HTTP_AUTHORIZATION="Token guess")
    assert response.status_code == 429 and response.json()["check"] == "throttled"
    cache.clear()


def test_signing_out_ends_the_session(client, signed_in):
    assert client.post("/my-site/sign-out").status_code == 302
    assert client.get("/my-site/")["Location"] == "/my-site/sign-in"
