"""Uploads bounded per site: a count per day (AIPERF_UPLOADS_PER_DAY) and how many at once
(AIPERF_UPLOAD_CONCURRENCY), each refused with a 429 that names the limit. (The size limit, 413, is
in test_rejections.py.) About 5 s."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import httpx
from django.utils import timezone

from leaderboard.models import Submission
from tests.service.conftest import new_site, nothing_left, upload


def refused(resp, check: str, words: str) -> None:
    assert resp.status_code == 429, resp.content
    body = resp.json()
    assert body["check"] == check and words in body["detail"], body


def test_daily_count_per_site(site_a, site_b, make_bundle, settings, media_root):
    settings.AIPERF_UPLOADS_PER_DAY = 2
    for _ in range(2):
        assert upload(site_a.client, make_bundle(site_a.key)).status_code == 201
    before = sorted(nothing_left(media_root))
    refused(upload(site_a.client, make_bundle(site_a.key)), "quota", "AIPERF_UPLOADS_PER_DAY=2")
    assert sorted(nothing_left(media_root)) == before  # the refused upload left nothing
    assert upload(site_b.client, make_bundle(site_b.key)).status_code == 201  # per site
    # A day later the old submissions no longer count.
    Submission.objects.filter(site=site_a.site).update(created_at=timezone.now() - timedelta(days=1, minutes=1))
    assert upload(site_a.client, make_bundle(site_a.key)).status_code == 201


def multipart(data: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="bundle"; filename="b.tar.gz"\r\n'
            "Content-Type: application/gzip\r\n\r\n").encode()
    return head + data + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def test_uploads_at_once_per_site(live_server, transactional_db, make_bundle, settings):
    """A site's second upload while its first is still being received is refused; the first completes."""
    settings.AIPERF_UPLOAD_CONCURRENCY = 1
    a = new_site("Busy site")
    body, ctype = multipart(make_bundle(a.key).read_bytes())
    url = f"{live_server.url}/api/v1/submissions/"
    headers = {"Authorization": f"Token {a.token}", "Content-Type": ctype, "Content-Length": str(len(body))}
    release = threading.Event()

    def slow_body():
        yield body[:100]
        release.wait(30)  # the server holds the upload slot while it waits for the rest
        yield body[100:]

    first: dict[str, httpx.Response] = {}
    sender = threading.Thread(target=lambda: first.setdefault("r", httpx.post(url, content=slow_body(),
                                                                               headers=headers, timeout=60)))
    sender.start()
    try:
        time.sleep(1.0)
        other, _ = multipart(b"x" * 10)
        second = httpx.post(url, content=other, headers={**headers, "Content-Length": str(len(other))}, timeout=30)
        refused(second, "concurrency", "AIPERF_UPLOAD_CONCURRENCY=1")
    finally:
        release.set()
        sender.join(60)
    assert first["r"].status_code == 201, first["r"].text
    # The slot was given back: the next upload is taken (and answered, here as a duplicate).
    again = httpx.post(url, content=body, headers=headers, timeout=60)
    assert again.status_code == 200 and again.json()["id"] == first["r"].json()["id"]

