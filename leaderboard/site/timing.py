"""`Server-Timing: app;dur=<ms>` on every response: the time Django spent on the request.

Put it first in MIDDLEWARE to time the whole stack (bench/site_latency.py reads it; browsers show it
in their network panel). It adds one header and nothing else.
"""

from __future__ import annotations

import time


class ServerTimingMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        start = time.perf_counter()
        response = self.get_response(request)
        ms = (time.perf_counter() - start) * 1000.0
        existing = response.get("Server-Timing")
        value = f"app;dur={ms:.2f}"
        response["Server-Timing"] = f"{existing}, {value}" if existing else value
        return response
