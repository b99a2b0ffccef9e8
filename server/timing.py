"""`Server-Timing: app;dur=<ms>` on every response: the time Django spent on the request.

Wired by the setting AIPERF_SERVER_TIMING=1 (server/settings.py puts it first in MIDDLEWARE, so it
times the whole stack); bench/site_latency.py turns it on and reads it, and browsers show it in
their network panel. It adds one header and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse


class ServerTimingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        start = time.perf_counter()
        response = self.get_response(request)
        ms = (time.perf_counter() - start) * 1000.0
        existing = response.get("Server-Timing")
        value = f"app;dur={ms:.2f}"
        response["Server-Timing"] = f"{existing}, {value}" if existing else value
        return response
