"""The Server-Timing middleware bench/site_latency.py reads."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def test_server_timing_header(client, settings):
    settings.MIDDLEWARE = ["server.timing.ServerTimingMiddleware", *settings.MIDDLEWARE]
    resp = client.get("/methodology")
    assert re.fullmatch(r"app;dur=\d+\.\d\d", resp["Server-Timing"])
