"""Receiving an upload: the quick synchronous checks, then atomic storage, then the verification task.

A bundle that fails a check here leaves nothing behind (no row, no file): the upload is written to
a temporary file under MEDIA_ROOT/tmp, checked, and either moved to its final place inside the
transaction that creates the Submission, or deleted. The deeper checks run in the Celery task
(leaderboard/tasks.py, leaderboard/pipeline.py). Imports go one way: api/views -> intake -> tasks ->
pipeline; a refusal is a `leaderboard.errors.Rejected`.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction

from leaderboard import bundles, tasks
from leaderboard.errors import Rejected
from leaderboard.models import RunAttempt, Site, SiteKey, Submission

log = logging.getLogger(__name__)


def too_large(size: int) -> Rejected:
    limit = settings.AIPERF_MAX_UPLOAD_BYTES
    return Rejected("size", f"bundle of {size} bytes is over this service's upload limit of {limit} bytes "
                            "(AIPERF_MAX_UPLOAD_BYTES)", status=413)


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


def check_rehearsal(run_id: str, rehearsal: bool) -> None:
    """A run on a rehearsal token goes in as a rehearsal (`rehearsal`), and only such a run does: a
    rehearsal is never ranked, so it cannot be submitted for the list, and the token is the service's own record."""
    on_rehearsal_token = RunAttempt.objects.filter(run_id=run_id, rehearsal=True).exists()
    if on_rehearsal_token and not rehearsal:
        raise Rejected("rehearsal", f"run {run_id} ran on a rehearsal token: a rehearsal is verified for its site "
                                    "only and never ranked, so it cannot be submitted for the list; submit it as a "
                                    "rehearsal (aiperf-runner submit --rehearsal)")
    if rehearsal and not on_rehearsal_token:
        raise Rejected("rehearsal", f"run {run_id} did not run on a rehearsal token (aiperf-runner run --rehearsal): "
                                    "submit it without --rehearsal")


def same_bundle(site: Site, digest: str, rehearsal: bool) -> Submission | None:
    """The site's submission of this bundle, if it was uploaded before (Rejected when it went in as a
    rehearsal and now does not, or the other way round)."""
    existing = Submission.objects.filter(sha256=digest, site=site).first()
    if existing is not None and existing.rehearsal != rehearsal:
        check_rehearsal(existing.run_id, rehearsal)
    return existing


def check_run_id(run_id: str, site: Site) -> None:
    seen = Submission.objects.filter(run_id=run_id).only("pk", "site_id").first()
    if seen is None:
        return
    # Another site's submission is not this site's business: neither its number nor that it is another's.
    which = f" (submission {seen.pk})" if seen.site_id == site.pk else ""
    raise Rejected("run_id", f"run {run_id} was already submitted{which}; a run can be submitted once")


def precheck(path: Path, site: Site, rehearsal: bool = False) -> tuple[SiteKey, str]:
    """The synchronous checks of a stored upload: (the signing key, the run id) or Rejected."""
    with bundles.extracted(path) as root:
        manifest, fingerprint = bundles.manifest_key(root)
        key = site_key(site, fingerprint)
        bundles.check_signed(root, key.public_key)
        bundles.check_chain(root)
    check_rehearsal(manifest["run_id"], rehearsal)
    check_run_id(manifest["run_id"], site)
    return key, manifest["run_id"]


@dataclass
class Received:
    submission: Submission
    created: bool


def _spool(upload: UploadedFile, dest: Path) -> tuple[str, int]:
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


def no_space(exc: OSError) -> Rejected:
    return Rejected("storage", f"the service has no room to store the bundle ({exc.strerror}); nothing was kept: "
                               "try again later", status=507)


def receive(site: Site, upload: UploadedFile, *, rehearsal: bool = False) -> Received:
    """Check and store an uploaded bundle; queue its verification once the row is committed.

    A full disk under MEDIA_ROOT refuses the upload (507, check `storage`) with nothing kept: the
    temporary file is removed and no row was written (the move happens inside the transaction).
    """
    try:
        return _receive(site, upload, rehearsal)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            log.error("upload refused: no space under MEDIA_ROOT: %s", exc)
            raise no_space(exc) from None
        raise


def _receive(site: Site, upload: UploadedFile, rehearsal: bool) -> Received:
    if upload.size is not None and upload.size > settings.AIPERF_MAX_UPLOAD_BYTES:
        raise too_large(upload.size)
    fd, name = tempfile.mkstemp(prefix="upload-", suffix=".tar.gz", dir=bundles.tmp_dir())
    os.close(fd)
    tmp = Path(name)
    try:
        digest, size = _spool(upload, tmp)
        return accept(site, tmp, digest, size, rehearsal=rehearsal)
    finally:
        tmp.unlink(missing_ok=True)


def accept(site: Site, tmp: Path, digest: str, size: int, *, rehearsal: bool = False) -> Received:
    """Make the Submission of a complete, stored upload (`tmp`, under MEDIA_ROOT, of this sha256 and size):
    the same bundle again answers its submission; else the synchronous checks, then the row and the move
    of `tmp` to its final place in one transaction. Shared by the single-request and the chunked upload
    (leaderboard/resumable.py); the caller removes `tmp` if it is still there. `rehearsal`: submitted as
    a rehearsal (`check_rehearsal`)."""
    existing = same_bundle(site, digest, rehearsal)
    if existing is not None:
        return Received(existing, False)
    key, run_id = precheck(tmp, site, rehearsal)
    rel = bundles.bundle_path(digest)
    final: Path | None = None
    try:
        with transaction.atomic():
            submission = Submission.objects.create(site=site, key=key, sha256=digest, size=size, run_id=run_id,
                                                   rehearsal=rehearsal)
            # A witnessed run's attempt is now submitted (the system's "runs submitted").
            RunAttempt.objects.filter(run_id=run_id, site=site, submission__isnull=True).update(
                submission=submission)
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
        existing = same_bundle(site, digest, rehearsal)
        if existing is not None:
            return Received(existing, False)
        check_run_id(run_id, site)
        raise
    except BaseException:
        if final is not None:
            final.unlink(missing_ok=True)
        raise
    submission.refresh_from_db()
    return Received(submission, True)


def enqueue(submission_id: int) -> None:
    tasks.verify_submission.delay(submission_id)
