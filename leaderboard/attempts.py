"""Runs attempted against runs submitted: every run token the service issued is on the record, the
rehearsals' counted apart."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from leaderboard.models import RunAttempt, Submission, System

VERIFIED = [Submission.Status.VERIFIED, Submission.Status.PUBLISHED, Submission.Status.WITHDRAWN]


def attempt_counts(system: System) -> dict[str, int]:
    """{attempted, submitted, verified, abandoned} of a system's run tokens for the list, and {rehearsals,
    rehearsals_verified} of its rehearsal tokens."""
    cutoff = timezone.now() - timedelta(seconds=settings.AIPERF_ABANDONED_AFTER_S)
    real = Q(rehearsal=False)
    counts = RunAttempt.objects.filter(system=system).aggregate(
        attempted=Count("pk", filter=real), submitted=Count("pk", filter=real & Q(submission__isnull=False)),
        verified=Count("pk", filter=real & Q(submission__status__in=VERIFIED)),
        abandoned=Count("pk", filter=real & Q(submission__isnull=True, issued_at__lt=cutoff)),
        rehearsals=Count("pk", filter=Q(rehearsal=True)),
        rehearsals_verified=Count("pk", filter=Q(rehearsal=True, submission__status__in=VERIFIED)))
    return {k: int(v or 0) for k, v in counts.items()}
