"""The chunked upload's protocol (tus 1.0.0 core, creation, termination) in-process: offsets, refusals, the
sha256 checked once at the end, limits, termination and the sweep. (On the real stack, through cut
connections and a restart: test_e2e_resumable_upload.py.) A few seconds."""

from __future__ import annotations

import base64
import hashlib
import subprocess
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from leaderboard import tasks
from leaderboard.models import Submission, UploadSession
from tests.helpers import need_service
from tests.service.conftest import new_site, nothing_left, upload

TUS = {"HTTP_TUS_RESUMABLE": "1.0.0"}
OCTETS = "application/offset+octet-stream"


def create(client, data: bytes, digest: str | None = None, length: int | None = None):
    meta = "sha256 " + base64.b64encode((digest or hashlib.sha256(data).hexdigest()).encode()).decode()
    return client.post("/api/v1/uploads/", HTTP_UPLOAD_LENGTH=str(len(data) if length is None else length),
                       HTTP_UPLOAD_METADATA=meta, **TUS)


def patch(client, url: str, data: bytes, offset: int, content_type: str = OCTETS):
    return client.generic("PATCH", url, data, content_type=content_type, HTTP_UPLOAD_OFFSET=str(offset), **TUS)


def head_offset(client, url: str) -> int:
    resp = client.head(url, **TUS)
    assert resp.status_code == 200, resp.content
    return int(resp["Upload-Offset"])


def send_all(client, data: bytes, chunk: int):
    made = create(client, data)
    assert made.status_code == 201, made.content
    url = made["Location"]
    while True:
        at = head_offset(client, url)
        resp = patch(client, url, data[at:at + chunk], at)
        if resp.status_code != 204:
            return url, resp


def test_chunks_then_one_check_and_the_same_submission_as_one_request(site_a, make_bundle, settings, media_root):
    settings.AIPERF_MAX_UPLOAD_BYTES = 1024  # the single-request limit does not bound chunked uploads
    data = make_bundle(site_a.key).read_bytes()
    url, done = send_all(site_a.client, data, chunk=len(data) // 3 + 1)
    assert done.status_code == 201, done.content
    sub = Submission.objects.get()
    assert done.json()["id"] == sub.pk and sub.sha256 == hashlib.sha256(data).hexdigest() and sub.size == len(data)
    assert (media_root / sub.bundle.name).read_bytes() == data
    assert sub.status == "verified"  # verification ran (in-process here) once the upload was complete
    # The last answer lost: the offset is the whole length, and an empty PATCH at the end answers again.
    assert head_offset(site_a.client, url) == len(data)
    again = patch(site_a.client, url, b"", len(data))
    assert again.status_code == 200 and again.json()["id"] == sub.pk
    # The same bundle later: its submission at once, in either way of uploading.
    assert create(site_a.client, data).json()["id"] == sub.pk
    assert upload(site_a.client, data).status_code == 413  # over AIPERF_MAX_UPLOAD_BYTES in one request
    assert Submission.objects.count() == 1
    assert not [p for p in nothing_left(media_root) if p.startswith("partial/") and p.endswith(".part")]


def test_offsets_and_protocol_refusals(site_a, site_b, make_bundle):
    data = make_bundle(site_a.key).read_bytes()
    url = create(site_a.client, data)["Location"]
    assert patch(site_a.client, url, data[:100], 0).status_code == 204
    wrong = patch(site_a.client, url, data[100:200], 50)
    assert wrong.status_code == 409 and wrong.json()["check"] == "offset"
    assert head_offset(site_a.client, url) == 100
    assert patch(site_a.client, url, data[100:], 100, content_type="application/json").status_code == 415
    assert site_a.client.head(url).status_code == 412  # no Tus-Resumable
    assert site_b.client.head(url, **TUS).status_code == 404  # another site's upload
    assert patch(site_a.client, url, data[100:] + b"x", 100).status_code == 413  # past Upload-Length
    # Created again for the same digest (the runner lost its state file): the same upload, at its offset.
    again = create(site_a.client, data)
    assert again.status_code == 201 and again["Location"] == url and again.json()["offset"] == 100
    options = site_a.client.options("/api/v1/uploads/")
    assert options["Tus-Version"] == "1.0.0" and "termination" in options["Tus-Extension"]


def test_wrong_digest_or_bad_bundle_refused_at_the_end_leaving_nothing(site_a, make_bundle, media_root):
    data = make_bundle(site_a.key).read_bytes()
    made = create(site_a.client, data, digest="0" * 64)
    resp = patch(site_a.client, made["Location"], data, 0)
    assert resp.status_code == 400 and resp.json()["check"] == "sha256", resp.content
    other = new_site("Unregistered", register_key=False)
    foreign = make_bundle(other.key).read_bytes()
    resp = patch(other.client, create(other.client, foreign)["Location"], foreign, 0)
    assert resp.status_code == 403 and resp.json()["check"] == "unknown_key", resp.content
    assert not UploadSession.objects.exists() and not Submission.objects.exists()
    assert [p for p in nothing_left(media_root) if not p.endswith(".lock")] == []


def test_limits_termination_and_sweep(site_a, make_bundle, settings, media_root):
    data = make_bundle(site_a.key).read_bytes()
    settings.AIPERF_MAX_CHUNKED_UPLOAD_BYTES = len(data) - 1
    big = create(site_a.client, data)
    assert big.status_code == 413 and "AIPERF_MAX_CHUNKED_UPLOAD_BYTES" in big.json()["detail"]
    settings.AIPERF_MAX_CHUNKED_UPLOAD_BYTES = 2 * len(data)
    settings.AIPERF_UPLOADS_PER_DAY = 0
    assert create(site_a.client, data).status_code == 429
    settings.AIPERF_UPLOADS_PER_DAY = 10
    assert create(site_a.client, data, length=0).status_code == 400
    # Termination removes the bytes.
    url = create(site_a.client, data)["Location"]
    assert patch(site_a.client, url, data[:10], 0).status_code == 204
    assert site_a.client.delete(url, **TUS).status_code == 204
    assert site_a.client.head(url, **TUS).status_code == 404 and not UploadSession.objects.exists()
    # The sweep removes an upload untouched for AIPERF_UPLOAD_SESSION_MAX_AGE_S, and keeps a fresh one.
    old_url = create(site_a.client, data)["Location"]
    patch(site_a.client, old_url, data[:10], 0)
    fresh = make_bundle(site_a.key).read_bytes()
    fresh_url = create(site_a.client, fresh)["Location"]
    UploadSession.objects.filter(sha256=hashlib.sha256(data).hexdigest()).update(
        updated_at=timezone.now() - timedelta(seconds=settings.AIPERF_UPLOAD_SESSION_MAX_AGE_S + 60))
    tasks.resume_stuck()
    assert site_a.client.head(old_url, **TUS).status_code == 404
    assert head_offset(site_a.client, fresh_url) == 0
    parts = sorted(Path(p).name for p in nothing_left(media_root) if p.endswith(".part"))
    assert parts == [f"{UploadSession.objects.get().pk}.part"]


def test_full_disk_refuses_with_507_and_keeps_the_bytes_for_later(site_a, make_bundle, media_root, settings):
    """A chunk that does not fit under MEDIA_ROOT (a 1 MiB tmpfs, so it needs root) is 507 `storage`; what
    was written stays, and the upload resumes from there once there is room."""
    data = make_bundle(site_a.key).read_bytes()
    media_root.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(media_root)],
                             capture_output=True, text=True)
    need_service(mounted.returncode == 0, f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        padding = media_root / "filler"
        url = create(site_a.client, data)["Location"]
        assert patch(site_a.client, url, data[:1000], 0).status_code == 204
        subprocess.run(["dd", "if=/dev/zero", f"of={padding}", "bs=4k"], capture_output=True)  # until ENOSPC
        full = patch(site_a.client, url, data[1000:], 1000)
        assert full.status_code == 507 and full.json()["check"] == "storage", full.content
        held = head_offset(site_a.client, url)
        assert 1000 <= held < len(data)
        padding.unlink()
        done = patch(site_a.client, url, data[held:], held)
        assert done.status_code == 201, done.content
        assert Submission.objects.get().sha256 == hashlib.sha256(data).hexdigest()
    finally:
        subprocess.run(["umount", "-l", str(media_root)], check=False)
