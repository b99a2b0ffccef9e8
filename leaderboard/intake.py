"""Receiving an upload: the quick synchronous checks, then atomic storage.

A bundle that fails a check here leaves nothing behind (no row, no file): the upload is written to
a temporary file under MEDIA_ROOT/tmp, checked, and either moved to its final place inside the
transaction that creates the Submission, or deleted. The deeper checks run in the Celery task
(leaderboard/pipeline.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiperf_runner.spec import bundle as spec_bundle
from aiperf_runner.spec import eventlog as spec_eventlog
from aiperf_runner.spec import keys as spec_keys
from django.conf import settings
from django.db import IntegrityError, transaction

from leaderboard.models import Site, SiteKey, Submission

log = logging.getLogger(__name__)


class Rejected(Exception):
    """An upload refused by a named check; `status` is the HTTP status to answer with."""

    def __init__(self, check: str, detail: str, status: int = 400) -> None:
        super().__init__(detail)
        self.check = check
        self.detail = detail
        self.status = status


def tmp_dir() -> Path:
    path = Path(settings.MEDIA_ROOT) / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def bundle_path(digest: str) -> str:
    """The storage name of a bundle, relative to MEDIA_ROOT."""
    return f"bundles/{digest[:2]}/{digest}.tar.gz"


def too_large(size: int) -> Rejected:
    limit = settings.AIPERF_MAX_UPLOAD_BYTES
    return Rejected("size", f"bundle of {size} bytes is over this service's upload limit of {limit} bytes "
                            "(AIPERF_MAX_UPLOAD_BYTES)", status=413)


@contextmanager
def extracted(path: str | Path):
    """A bundle safely unpacked into a temporary directory (BundleError -> Rejected 'bundle')."""
    with tempfile.TemporaryDirectory(prefix="extract-", dir=tmp_dir()) as tmp:
        root = Path(tmp) / "run"
        try:
            spec_bundle.safe_extract(path, root)
        except spec_bundle.BundleError as exc:
            raise Rejected("bundle", f"not an acceptable bundle: {exc}") from None
        yield root


def manifest_key(root: Path) -> tuple[dict[str, Any], str]:
    """The manifest and the fingerprint of the public key it names (computed, not copied)."""
    try:
        manifest = spec_bundle.read_manifest(root)
    except spec_bundle.BundleError as exc:
        raise Rejected("manifest", str(exc)) from None
    try:
        raw = base64.b64decode(str(manifest.get("public_key")), validate=True)
        fingerprint = spec_keys.fingerprint(raw)
    except (binascii.Error, ValueError):
        raise Rejected("manifest", f"{spec_bundle.MANIFEST_NAME} has no valid 'public_key'") from None
    if not isinstance(manifest.get("run_id"), str) or not manifest["run_id"]:
        raise Rejected("manifest", f"{spec_bundle.MANIFEST_NAME} has no 'run_id'")
    return manifest, fingerprint


def site_key(site: Site, fingerprint: str) -> SiteKey:
    """The site's registered, unrevoked key with this fingerprint, or Rejected (403)."""
    key = SiteKey.objects.filter(fingerprint=fingerprint, site=site).first()
    if key is None:
        raise Rejected("unknown_key", f"the bundle is signed with key {fingerprint}, which is not registered "
                                      f"to site {site.name!r} (aiperf-runner register uploads it)", status=403)
    if key.revoked:
        raise Rejected("revoked_key", f"the bundle is signed with key {fingerprint}, revoked on "
                                      f"{key.revoked_at:%Y-%m-%d %H:%M} UTC", status=403)
    return key


def check_signature_and_files(root: Path, key: SiteKey) -> None:
    """The signature of MANIFEST.json by `key`, then every file against the manifest."""
    body = (root / spec_bundle.MANIFEST_NAME).read_bytes()
    try:
        signature = base64.b64decode((root / spec_bundle.SIGNATURE_NAME).read_bytes().strip(), validate=True)
    except FileNotFoundError:
        raise Rejected("signature", f"{spec_bundle.SIGNATURE_NAME} missing: the bundle is not signed") from None
    except (binascii.Error, ValueError):
        raise Rejected("signature", f"{spec_bundle.SIGNATURE_NAME} is not valid base64") from None
    if not spec_keys.verify_signature(base64.b64decode(key.public_key), body, signature):
        raise Rejected("signature", f"bad signature: {spec_bundle.SIGNATURE_NAME} is not {key.fingerprint}'s "
                                    f"signature of {spec_bundle.MANIFEST_NAME}")
    findings = spec_bundle.check_manifest(root, pubkey=base64.b64decode(key.public_key))
    if findings:
        raise Rejected("manifest", "; ".join(findings))


def check_chain(root: Path) -> None:
    """The main log's hash chain (a line edited, dropped or moved), read as a stream."""
    try:
        for _ in spec_eventlog.iter_events(root / "events.jsonl"):
            pass
    except FileNotFoundError:
        raise Rejected("chain", "events.jsonl missing: not a run directory") from None
    except spec_eventlog.LogError as exc:
        raise Rejected("chain", f"events.jsonl {exc}") from None


def check_run_id(run_id: str) -> None:
    seen = Submission.objects.filter(run_id=run_id).only("pk").first()
    if seen is not None:
        raise Rejected("run_id", f"run {run_id} was already submitted (submission {seen.pk}); "
                                 "a run can be submitted once")


def precheck(path: Path, site: Site) -> tuple[SiteKey, str]:
    """The synchronous checks of a stored upload: (the signing key, the run id) or Rejected."""
    with extracted(path) as root:
        manifest, fingerprint = manifest_key(root)
        key = site_key(site, fingerprint)
        check_signature_and_files(root, key)
        check_chain(root)
    check_run_id(manifest["run_id"])
    return key, manifest["run_id"]


@dataclass
class Received:
    submission: Submission
    created: bool


def _spool(upload, dest: Path) -> tuple[str, int]:
    """Copy the upload to `dest` in chunks; return (sha256, size)."""
    limit = settings.AIPERF_MAX_UPLOAD_BYTES
    digest, size = hashlib.sha256(), 0
    with open(dest, "wb") as out:
        for chunk in upload.chunks():
            size += len(chunk)
            if size > limit:
                raise too_large(size)
            digest.update(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest(), size


def receive(site: Site, upload) -> Received:
    """Check and store an uploaded bundle; queue its verification once the row is committed."""
    if upload.size is not None and upload.size > settings.AIPERF_MAX_UPLOAD_BYTES:
        raise too_large(upload.size)
    fd, name = tempfile.mkstemp(prefix="upload-", suffix=".tar.gz", dir=tmp_dir())
    os.close(fd)
    tmp = Path(name)
    final: Path | None = None
    try:
        digest, size = _spool(upload, tmp)
        existing = Submission.objects.filter(sha256=digest, site=site).first()
        if existing is not None:
            return Received(existing, False)
        key, run_id = precheck(tmp, site)
        rel = bundle_path(digest)
        try:
            with transaction.atomic():
                submission = Submission.objects.create(site=site, key=key, sha256=digest, size=size, run_id=run_id)
                final = Path(settings.MEDIA_ROOT) / rel
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, final)
                submission.bundle.name = rel
                submission.save(update_fields=["bundle"])
                transaction.on_commit(lambda: enqueue(submission.pk), robust=True)
        except IntegrityError:
            # A concurrent upload of the same bundle or run won the race.
            if final is not None:
                final.unlink(missing_ok=True)
            existing = Submission.objects.filter(sha256=digest, site=site).first()
            if existing is not None:
                return Received(existing, False)
            check_run_id(run_id)
            raise
        except BaseException:
            if final is not None:
                final.unlink(missing_ok=True)
            raise
        submission.refresh_from_db()
        return Received(submission, True)
    finally:
        tmp.unlink(missing_ok=True)


def enqueue(submission_id: int) -> None:
    from leaderboard.tasks import verify_submission

    verify_submission.delay(submission_id)
