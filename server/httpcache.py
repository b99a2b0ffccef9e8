"""Cache-Control on the API's reads, so that browsers, proxies and scripts polling the list ask cheaply.

An anonymous read of the list's data (the leaderboard, results, systems, sites, editions, the list's
log, the schema) may be kept AIPERF_API_MAX_AGE_S seconds by anyone, then asked again with its ETag
(django.middleware.http.ConditionalGetMiddleware answers 304 while nothing changed). A read that
follows a submission as it moves (submissions, runs, uploads, the witness) is asked again every time;
a read made with a site token is the site's alone and is never kept by a shared cache. A view that
set its own Cache-Control keeps it.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control, patch_vary_headers

API = ("/api/",)
# The answers that change while a site's submission is verified, audited, uploaded: never served stale.
FOLLOWED = ("/api/v1/submissions/", "/api/v1/runs/", "/api/v1/uploads/", "/api/v1/witness/", "/api/v1/keys/")


class ApiCacheControlMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.method not in ("GET", "HEAD") or not request.path.startswith(API):
            return response
        patch_vary_headers(response, ("Authorization",))
        if response.has_header("Cache-Control"):
            return response
        if "HTTP_AUTHORIZATION" in request.META:
            patch_cache_control(response, private=True, no_cache=True)
        elif response.status_code != 200 or request.path.startswith(FOLLOWED):
            patch_cache_control(response, public=True, no_cache=True)
        else:
            patch_cache_control(response, public=True, max_age=settings.AIPERF_API_MAX_AGE_S)
        return response
