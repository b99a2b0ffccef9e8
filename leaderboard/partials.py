"""Where unfinished chunked uploads live (MEDIA_ROOT/partial) and their clean-up.

Apart from the protocol (resumable.py) so that the periodic sweep (tasks.resume_stuck) can remove
abandoned uploads without importing the intake, which itself queues tasks.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from leaderboard.models import UploadSession


def partial_dir() -> Path:
    """Unfinished uploads: on MEDIA_ROOT's filesystem (the final move is a rename), apart from MEDIA_ROOT/tmp,
    whose sweep is tuned to tasks' lifetimes and not to an upload paused for a day."""
    path = Path(settings.MEDIA_ROOT) / "partial"
    path.mkdir(parents=True, exist_ok=True)
    return path


def part_path(session: UploadSession) -> Path:
    return partial_dir() / f"{session.id}.part"


def lock_path(session: UploadSession) -> Path:
    return partial_dir() / f"{session.id}.lock"


def drop(session: UploadSession) -> None:
    """Remove a session, its data and its lock file (termination, a refusal, the sweep)."""
    part_path(session).unlink(missing_ok=True)
    lock_path(session).unlink(missing_ok=True)
    UploadSession.objects.filter(pk=session.pk).delete()


def sweep(max_age_s: float) -> int:
    """Remove sessions untouched for `max_age_s` (abandoned, or finished long ago) and files of MEDIA_ROOT/
    partial that no session owns; the number of sessions removed."""
    cutoff = timezone.now() - timedelta(seconds=max_age_s)
    stale = list(UploadSession.objects.filter(updated_at__lt=cutoff))
    for session in stale:
        drop(session)
    known = {str(pk) for pk in UploadSession.objects.values_list("pk", flat=True)}
    for entry in partial_dir().iterdir():
        try:
            if entry.stem not in known and entry.stat().st_mtime < cutoff.timestamp():
                entry.unlink()
        except FileNotFoundError:
            continue
    return len(stale)
