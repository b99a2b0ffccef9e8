"""Chunked, resumable uploads of big bundles: the tus 1.0.0 protocol's core, creation and termination.

A session (`UploadSession`) is created with the bundle's length and sha256; its bytes are appended to
MEDIA_ROOT/partial/<id>.part, whose size *is* the offset a client resumes from, so a cut connection or a
restart of the web process loses at most the bytes it had not written yet. Nothing is verified before
the last byte: then the whole file's sha256 is checked once, and the Submission is made exactly as a
single-request upload makes it (`intake.accept`). One request at a time works on a session (an flock on
<id>.lock); a second is refused with 409 and the client asks for the offset again. No well-kept Django tus
server library exists (django-tus stops at Django 3.2), hence this small one; docs/service.md has the API.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from aiperf_runner.spec.bundle import sha256_file
from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from leaderboard import intake, limits
from leaderboard.errors import Rejected
from leaderboard.models import Site, Submission, UploadSession
from leaderboard.partials import drop, lock_path, part_path

log = logging.getLogger(__name__)

TUS_VERSION = "1.0.0"
TUS_EXTENSIONS = "creation,termination"
PIECE = 1 << 20  # bytes read from the request and written at a time
SHA256 = re.compile(r"[0-9a-f]{64}")


def too_large(length: int) -> Rejected:
    limit = settings.AIPERF_MAX_CHUNKED_UPLOAD_BYTES
    return Rejected("size", f"bundle of {length} bytes is over this service's limit for chunked uploads of "
                            f"{limit} bytes (AIPERF_MAX_CHUNKED_UPLOAD_BYTES)", status=413)


def storage_refusal(exc: OSError) -> Rejected:
    """A full disk or quota under MEDIA_ROOT as the 507 `storage` refusal; any other OSError raised again."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        log.error("chunked upload refused: no space under MEDIA_ROOT: %s", exc)
        return Rejected("storage", f"the service has no room to store the bundle ({exc.strerror}); the bytes "
                                   "received so far are kept: resume later", status=507)
    raise exc


@dataclass
class Created:
    session: UploadSession | None
    submission: Submission | None  # the same bundle was submitted before: nothing to upload
    created: bool = True


def create(site: Site, length: int, sha256: str, *, rehearsal: bool = False) -> Created:
    """A session for this bundle: a new one, or the site's unfinished one of the same digest (the runner
    re-run with the same bundle resumes it even without its state file). `rehearsal`: announced as a
    rehearsal (intake.check_rehearsal decides once the bundle is complete)."""
    if length < 1:
        raise Rejected("request", "Upload-Length must be a positive number of bytes")
    if length > settings.AIPERF_MAX_CHUNKED_UPLOAD_BYTES:
        raise too_large(length)
    if not SHA256.fullmatch(sha256):
        raise Rejected("request", "Upload-Metadata must carry 'sha256': the bundle's digest, 64 lowercase hex "
                                  "digits (base64-encoded, as tus encodes metadata values)")
    done = intake.same_bundle(site, sha256, rehearsal)
    if done is not None:
        return Created(None, done, False)
    limits.check_daily_quota(site)
    session = UploadSession.objects.filter(site=site, sha256=sha256).first()
    if session is not None and (session.length != length or session.submission_id is not None
                                or session.rehearsal != rehearsal):
        drop(session)  # announced with another length or intent, or a finished one's leftover
        session = None
    if session is not None:
        return Created(session, None, False)
    try:
        session = UploadSession.objects.create(id=uuid.uuid4(), site=site, length=length, sha256=sha256,
                                               rehearsal=rehearsal)
    except IntegrityError:  # a concurrent creation of the same bundle's session won
        return Created(UploadSession.objects.get(site=site, sha256=sha256), None, False)
    try:
        part_path(session).touch()
    except OSError as exc:
        session.delete()
        raise storage_refusal(exc) from None
    return Created(session, None, True)


def offset(session: UploadSession) -> int | None:
    """The bytes received so far (all of them once its submission is made); None: its file is gone."""
    if session.submission_id is not None:
        return session.length
    try:
        return part_path(session).stat().st_size
    except FileNotFoundError:
        return None


def gone(session: UploadSession) -> Rejected:
    return Rejected("upload", f"upload {session.id} holds no data any more (removed after "
                              "AIPERF_UPLOAD_SESSION_MAX_AGE_S, or refused); start it again", status=404)


@contextmanager
def locked(session: UploadSession) -> Iterator[None]:
    """The session's lock, or Rejected (409): another request is writing it (a client's retry that came
    before the server noticed the first connection was cut)."""
    with open(lock_path(session), "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Rejected("busy", f"upload {session.id} is being written by another request; ask for its "
                                   "offset (HEAD) and resume from there", status=409) from None
        yield  # the lock goes with the file's closing, or with the process


def append(session: UploadSession, read: Callable[[int], bytes], at: int, count: int) -> int:
    """Append `count` bytes read from the request at offset `at`; the new offset. The bytes are written as
    they come, so a cut connection keeps what arrived."""
    with locked(session):
        now = offset(session)
        if now is None:
            raise gone(session)
        if at != now:
            raise Rejected("offset", f"Upload-Offset {at} is not this upload's offset {now}: ask for it (HEAD) "
                                     "and resume from there", status=409)
        if count > session.length - now:
            raise Rejected("size", f"{count} bytes at offset {now} go past the announced Upload-Length "
                                   f"{session.length}", status=413)
        try:
            with open(part_path(session), "ab") as out:
                try:
                    left = count
                    while left > 0:
                        piece = read(min(PIECE, left))
                        if not piece:
                            break  # the client went away: what was written stays
                        out.write(piece)
                        left -= len(piece)
                finally:
                    out.flush()
                    os.fsync(out.fileno())
                    UploadSession.objects.filter(pk=session.pk).update(updated_at=timezone.now())
        except OSError as exc:
            raise storage_refusal(exc) from None
        return part_path(session).stat().st_size


def finish(session: UploadSession) -> intake.Received:
    """Check the complete upload's sha256 and make its Submission (as a single-request upload does); a
    refusal removes the upload. Asked again (the answer was lost), the submission it made."""
    with locked(session):
        session.refresh_from_db()
        if session.submission_id is not None:
            return intake.Received(Submission.objects.get(pk=session.submission_id), False)
        path = part_path(session)
        now = offset(session)
        if now is None:
            raise gone(session)
        if now != session.length:
            raise Rejected("offset", f"upload {session.id} has {now} of its {session.length} bytes; send the "
                                     "rest first", status=409)
        digest = sha256_file(path)
        if digest != session.sha256:
            drop(session)
            raise Rejected("sha256", f"the {session.length} bytes received have sha256 {digest}, not the "
                                     f"announced {session.sha256}; nothing was kept: upload the bundle again")
        limits.check_daily_quota(site=session.site)
        try:
            received = intake.accept(session.site, path, digest, session.length, rehearsal=session.rehearsal)
        except Rejected:
            drop(session)
            raise
        except OSError as exc:
            raise storage_refusal(exc) from None
        session.submission = received.submission
        session.save(update_fields=["submission"])
        path.unlink(missing_ok=True)  # still there when the bundle had been submitted before
        lock_path(session).unlink(missing_ok=True)  # a later request sees the submission before it writes
        return received

