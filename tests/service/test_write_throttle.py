"""Writes are throttled per site token (AIPERF_WRITE_RATE); reads and other sites are not affected.

Run on the embedded memory cache and on Redis, the production cache (skipped without Redis, failed
under AIPERF_REQUIRE_SERVICES=1). About 2 s.
"""

from __future__ import annotations

import uuid

import pytest
from aiperf_runner.spec import keys

from tests.helpers import need_service
from tests.service.conftest import new_site
from tests.service.stack import REDIS_URL, redis_ok


@pytest.fixture(params=["memory", "redis"])
def cache(request, settings):
    if request.param == "redis":
        need_service(redis_ok(), f"Redis not reachable at {REDIS_URL}")
        settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                       "LOCATION": REDIS_URL, "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}}
    settings.AIPERF_WRITE_RATE = "3/min"
    return request.param


def register_key(client):
    return client.post("/api/v1/keys/", {"public_key": keys.public_b64(keys.generate_key())}, format="json")


def test_a_site_over_the_write_rate_gets_429(cache, transactional_db):
    a, b = new_site("Throttled A"), new_site("Throttled B")
    assert [register_key(a.client).status_code for _ in range(3)] == [201, 201, 201]
    over = register_key(a.client)
    assert over.status_code == 429
    assert "throttled" in over.json()["detail"].lower() and int(over["Retry-After"]) > 0
    assert a.client.get("/api/v1/keys/").status_code == 200  # reads are not throttled
    assert register_key(b.client).status_code == 201  # another site has its own count


def test_a_new_token_starts_a_new_count(cache, transactional_db):
    a = new_site("Throttled C")
    for _ in range(3):
        register_key(a.client)
    assert register_key(a.client).status_code == 429
    token = a.site.new_token()
    a.site.save()
    a.client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert register_key(a.client).status_code == 201
