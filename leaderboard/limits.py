"""Limits on what one site may send: writes per minute, uploads per day, uploads at once.

Wrong site tokens are counted per client address (the API and the sign-in page together): after
AIPERF_FAILED_TOKENS of them in a window, every token from that address is refused with 429 until it ends.
The write throttle is DRF's (`SimpleRateThrottle`, rate `AIPERF_WRITE_RATE`), counted per site token
in the cache (Redis in production, shared by every web process). The daily count comes from the
database (the submissions the site made in the last 24 hours), so it survives a restart; the uploads
in progress are a counter in the cache, taken before the body is read and given back when the
answer is ready. Each refusal is a 429 that says which limit and its setting.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from django.utils import timezone
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import SimpleRateThrottle

from leaderboard.errors import Rejected
from leaderboard.models import Site, Submission

# An upload slot not given back (the process died mid-upload) is freed after this long.
SLOT_TTL_S = 3600


class SiteWriteThrottle(SimpleRateThrottle):
    """Writes (POST and the like) of one site token: at most AIPERF_WRITE_RATE. Reads are not throttled."""

    scope = "site_write"

    def get_rate(self) -> str:
        return settings.AIPERF_WRITE_RATE  # read per request: a test or an operator may change it

    def get_cache_key(self, request, view) -> str | None:
        if request.method in SAFE_METHODS or not isinstance(request.auth, Site):
            return None  # reads, and writes without a token (refused before throttling anyway)
        # The token's hash, not the site's id: a new token starts a new count, and ids may be reused.
        return self.cache_format % {"scope": self.scope, "ident": request.auth.token_hash}


def check_daily_quota(site: Site) -> None:
    """Rejected (429) when the site has made AIPERF_UPLOADS_PER_DAY submissions in the last 24 hours."""
    limit = settings.AIPERF_UPLOADS_PER_DAY
    since = timezone.now() - timedelta(days=1)
    made = Submission.objects.filter(site=site, created_at__gte=since).count()
    if made >= limit:
        raise Rejected("quota", f"site {site.name!r} has submitted {made} bundles in the last 24 hours, this "
                                f"service's limit (AIPERF_UPLOADS_PER_DAY={limit}); try again later", status=429)


@contextmanager
def upload_slot(site: Site) -> Iterator[None]:
    """Hold one of the site's AIPERF_UPLOAD_CONCURRENCY upload slots, or Rejected (429) when all are taken."""
    limit = settings.AIPERF_UPLOAD_CONCURRENCY
    key = f"aiperf:uploads-in-progress:{site.pk}"
    held = _count(key, SLOT_TTL_S)
    try:
        if held > limit:
            raise Rejected("concurrency", f"site {site.name!r} already has {limit} uploads in progress, this "
                                          f"service's limit (AIPERF_UPLOAD_CONCURRENCY={limit}); wait for one to "
                                          "finish", status=429)
        yield
    finally:
        try:
            cache.decr(key)
        except ValueError:
            pass


def _failed_tokens_key(request: HttpRequest) -> str:
    return f"aiperf:failed-tokens:{client_ip(request) or 'unknown'}"


def token_guesses_exhausted(request: HttpRequest) -> bool:
    """Whether this client address gave AIPERF_FAILED_TOKENS wrong site tokens in the current window (the API
    and the site sign-in page count together: a guessed token is a guessed token wherever it is tried)."""
    return int(cache.get(_failed_tokens_key(request)) or 0) >= settings.AIPERF_FAILED_TOKENS


def count_failed_token(request: HttpRequest) -> None:
    """One more wrong site token from this client address (the window starts at its first)."""
    _count(_failed_tokens_key(request), settings.AIPERF_FAILED_TOKENS_WINDOW_S)


def _count(key: str, ttl_s: int) -> int:
    """One more on the cache counter `key` (started at 0 for `ttl_s` seconds if it was not there); its count."""
    cache.add(key, 0, timeout=ttl_s)
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=ttl_s)
        return 1


def client_ip(request: HttpRequest) -> str | None:
    """The client's address for the admin lockout: REMOTE_ADDR, or the one AIPERF_PROXY_COUNT trusted
    proxies from the right of X-Forwarded-For (the entries left of it may be forged by the client)."""
    proxies = settings.AIPERF_PROXY_COUNT
    if proxies > 0:
        chain = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
        if len(chain) >= proxies:
            return chain[-proxies]
    return request.META.get("REMOTE_ADDR")
