"""The API's reads as a browser, a proxy or a polling script meets them: an ETag with 304 while nothing
changed, Cache-Control that keeps the list's data a minute and a site's own answers private, CORS for
reads from any origin (never writes), and wrong site tokens throttled per client address."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from tests.service.conftest import new_site


@pytest.fixture(autouse=True)
def no_guesses_counted():
    cache.clear()
    yield
    cache.clear()


def directives(response) -> set[str]:
    return {d.strip() for d in response["Cache-Control"].split(",")}


def test_an_unchanged_list_answers_304_to_its_etag(db):
    client = APIClient()
    first = client.get("/api/v1/leaderboard/")
    assert first.status_code == 200 and first["ETag"]
    assert first["Cache-Control"] == "public, max-age=60"
    assert "Authorization" in first["Vary"]
    again = client.get("/api/v1/leaderboard/", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and not again.content
    assert again["Cache-Control"] == "public, max-age=60"
    assert client.get("/api/v1/leaderboard/", HTTP_IF_NONE_MATCH='"something-else"').status_code == 200


def test_what_follows_a_submission_is_asked_again_and_a_sites_answers_stay_private(db, settings):
    settings.AIPERF_API_MAX_AGE_S = 30
    client = APIClient()
    assert client.get("/api/v1/systems/")["Cache-Control"] == "public, max-age=30"
    assert directives(client.get("/api/v1/submissions/")) == {"public", "no-cache"}
    site = new_site("Private Lab")
    client.credentials(HTTP_AUTHORIZATION=f"Token {site.token}")
    mine = client.get("/api/v1/submissions/")
    assert mine.status_code == 200 and directives(mine) == {"private", "no-cache"}
    assert directives(client.get("/api/v1/leaderboard/")) == {"private", "no-cache"}


def test_any_origin_may_read_and_none_may_write(db):
    client = APIClient()
    read = client.get("/api/v1/leaderboard/", HTTP_ORIGIN="https://hpc.example.org")
    assert read["Access-Control-Allow-Origin"] == "*"
    assert "ETag" in read["Access-Control-Expose-Headers"]
    assert "Access-Control-Allow-Credentials" not in read
    preflight = client.options("/api/v1/leaderboard/", HTTP_ORIGIN="https://hpc.example.org",
                               HTTP_ACCESS_CONTROL_REQUEST_METHOD="GET")
    assert preflight.status_code == 200 and "GET" in preflight["Access-Control-Allow-Methods"]
    allowed = {m.strip() for m in preflight["Access-Control-Allow-Methods"].split(",")}
    assert allowed == {"GET", "HEAD", "OPTIONS"}
    # A cross-origin upload would need the Authorization header, which no preflight allows.
    assert "authorization" not in preflight["Access-Control-Allow-Headers"].lower()
    # The pages are not an API: no CORS there.
    assert "Access-Control-Allow-Origin" not in client.get("/healthz", HTTP_ORIGIN="https://hpc.example.org")


def test_wrong_tokens_from_one_address_are_throttled_before_they_are_looked_up(db, settings,
                                                                               django_assert_max_num_queries):
    settings.AIPERF_FAILED_TOKENS = 3
    site = new_site("Guessed Lab")
    guesser = APIClient(REMOTE_ADDR="203.0.113.7")
    for n in range(3):
        r = guesser.get("/api/v1/submissions/", HTTP_AUTHORIZATION=f"Token guess-{n}")
        assert r.status_code == 401 and r.json()["check"] == "authentication_failed", r.json()
    with django_assert_max_num_queries(0):
        refused = guesser.get("/api/v1/submissions/", HTTP_AUTHORIZATION=f"Token {site.token}")
    assert refused.status_code == 429 and refused.json()["check"] == "throttled", refused.json()
    assert "AIPERF_FAILED_TOKENS=3" in refused.json()["detail"] and int(refused["Retry-After"]) == 600
    # A write is refused the same way; anonymous reads go on; another address is not held back.
    assert guesser.post("/api/v1/keys/", {}, HTTP_AUTHORIZATION="Token guess").status_code == 429
    assert guesser.get("/api/v1/leaderboard/").status_code == 200
    other = APIClient(REMOTE_ADDR="198.51.100.2")
    assert other.get("/api/v1/submissions/", HTTP_AUTHORIZATION=f"Token {site.token}").status_code == 200
