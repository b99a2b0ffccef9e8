"""Runs attempted against runs submitted: every run token the service issued is on the record, the
rehearsals' counted apart."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from leaderboard.models import RunAttempt, Submission, System

VERIFIED = [Submission.Status.VERIFIED, Submission.Status.PUBLISHED, Submission.Status.WITHDRAWN]


COUNTED = ("attempted", "submitted", "verified", "abandoned", "rehearsals", "rehearsals_verified")


def attempt_counts(system: System) -> dict[str, int]:
    """{attempted, submitted, verified, abandoned} of a system's run tokens for the list, and {rehearsals,
    rehearsals_verified} of its rehearsal tokens."""
    return counts_of([system.pk])[system.pk]


def counts_of(system_ids: list[int]) -> dict[int, dict[str, int]]:
    """attempt_counts of every system in `system_ids` in one query (a page of the API's systems)."""
    cutoff = timezone.now() - timedelta(seconds=settings.AIPERF_ABANDONED_AFTER_S)
    real = Q(rehearsal=False)
    rows = RunAttempt.objects.filter(system_id__in=system_ids).values("system_id").annotate(
        attempted=Count("pk", filter=real), submitted=Count("pk", filter=real & Q(submission__isnull=False)),
        verified=Count("pk", filter=real & Q(submission__status__in=VERIFIED)),
        abandoned=Count("pk", filter=real & Q(submission__isnull=True, issued_at__lt=cutoff)),
        rehearsals=Count("pk", filter=Q(rehearsal=True)),
        rehearsals_verified=Count("pk", filter=Q(rehearsal=True, submission__status__in=VERIFIED)))
    out = {pk: dict.fromkeys(COUNTED, 0) for pk in system_ids}
    for row in rows:
        counted: dict[str, Any] = dict(row)
        out[int(counted["system_id"])] = {k: int(counted[k] or 0) for k in COUNTED}
    return out
