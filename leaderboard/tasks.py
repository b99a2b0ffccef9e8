"""Celery tasks: verify a submission, re-verify results of an older verifier, resume stuck work.

The verification task acknowledges its message only when it has finished (CELERY_TASK_ACKS_LATE)
and a message whose worker died is delivered again (CELERY_TASK_REJECT_ON_WORKER_LOST; Redis
after its visibility timeout). The pipeline's claim makes a second delivery harmless.
"""

from __future__ import annotations

import logging
import threading

from celery import shared_task
from django import db
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from leaderboard import audit, bundles, partials, pipeline, ranking
from leaderboard.models import Edition

log = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def verify_submission(self, submission_id: int, reverify: bool = False) -> str:
    outcome = pipeline.run(submission_id, reverify=reverify)
    if outcome.busy_until is not None and not self.request.is_eager:
        # Another worker holds a fresh claim: look again when it would be stale, in case that worker died.
        wait = max((outcome.busy_until - timezone.now()).total_seconds(), 0.0) + 1.0
        raise self.retry(countdown=wait)
    return outcome.status


@shared_task
def reverify_stale() -> int:
    """Queue re-verification of every result whose verifier version is not the current one."""
    ids = list(pipeline.needs_reverify().values_list("pk", flat=True))
    for pk in ids:
        verify_submission.delay(pk, reverify=True)
    return len(ids)


@shared_task
def resume_stuck() -> int:
    """Queue verification of submissions that no live task is working on (e.g. a lost message), and remove
    the scratch files of workers killed mid-way and the chunked uploads abandoned long ago."""
    ids = list(pipeline.stuck().values_list("pk", flat=True))
    for pk in ids:
        verify_submission.delay(pk)
    removed = bundles.sweep_tmp(settings.AIPERF_TMP_MAX_AGE_S)
    if removed:
        log.warning("removed %d leftovers of killed workers from MEDIA_ROOT/tmp: %s", len(removed), removed)
    dropped = partials.sweep(settings.AIPERF_UPLOAD_SESSION_MAX_AGE_S)
    if dropped:
        log.warning("removed %d chunked uploads untouched for AIPERF_UPLOAD_SESSION_MAX_AGE_S", dropped)
    return len(ids)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def audit_submission(submission_id: int) -> str:
    """Re-evaluate a submission's challenged weights (its own queue: operators may run it on a GPU machine).
    A second delivery of the message (an audit longer than the visibility timeout) finds it decided."""
    return audit.run(submission_id)


_auditing: set[int] = set()  # without a broker: the submissions whose audit runs on a thread of this process
_auditing_lock = threading.Lock()


def enqueue_audit(submission_id: int) -> None:
    """Queue a submission's audit, once its challenge is answered. Without a broker (make demo's service: tasks
    run in the web process) it runs on a thread of its own, once at a time per submission: an audit that trains
    trials again takes minutes, and inside the upload's request it outlasted the client's timeout, whose retried
    uploads each started it again, three audits of one submission competing for the CPU."""
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        audit_submission.apply_async((submission_id,), queue=settings.AIPERF_AUDIT_QUEUE)
        return
    with _auditing_lock:
        if submission_id in _auditing:
            return
        _auditing.add(submission_id)
    threading.Thread(target=_audit_here, args=(submission_id,), name=f"audit-{submission_id}", daemon=True).start()


def _audit_here(submission_id: int) -> None:
    try:
        audit.run(submission_id)
    except Exception:  # a thread's exception would reach no one: logged, the audit stays pending
        log.exception("submission %s: the audit failed", submission_id)
    finally:
        with _auditing_lock:
            _auditing.discard(submission_id)
        db.connection.close()  # the thread's own connection


@shared_task
def freeze_due_editions() -> list[str]:
    """Freeze every edition whose submissions have closed (its calendar: docs/service.md "Ranks and editions");
    the names frozen. A freeze locks the edition's row, so two beats never freeze one twice."""
    frozen = []
    for edition in Edition.objects.filter(frozen_at=None, submissions_close__lte=timezone.now()):
        with transaction.atomic():
            try:
                ranking.freeze_edition(edition)
            except ValueError:  # frozen meanwhile by a maintainer or another beat
                continue
        frozen.append(edition.name)
        log.info("edition %s frozen: its submissions closed", edition.name)
    return frozen


@shared_task
def expire_challenges() -> int:
    """Withdraw results whose challenge went unanswered for AIPERF_CHALLENGE_DAYS."""
    return len(audit.expire())
