"""Rebuilding the results from the stored bundles (the source of truth) and comparing them with the stored ones.

`manage.py aiperf_rebuild --check` (leaderboard/management/commands/aiperf_rebuild.py) makes a scratch
database and runs itself again in a child process whose default database is that scratch one and
whose `source` database is the service's (AIPERF_REBUILD_SOURCE_URL, server/settings.py). The child
copies what verification needs besides the bundles (sites, keys, systems, peaks, witness keys, run
tokens and their receipts) and every submission back to `received`, runs the pipeline on each stored
bundle in upload order, and compares: outcome, the refusal's checks, the result's figures and the
verdict of every check. Nothing is written to the service's database, nor queued to its workers.
"""

from __future__ import annotations

import math
from typing import Any

from django.core.management.color import no_style
from django.db import connections

from leaderboard import pipeline
from leaderboard.models import (
    AcceleratorPeak,
    Heartbeat,
    Result,
    RunAttempt,
    Site,
    SiteKey,
    Submission,
    System,
    WitnessKey,
)

SOURCE = "source"
# What verification reads besides the bundle, in the order their foreign keys need.
INPUTS: list[type[Any]] = [Site, SiteKey, AcceleratorPeak, WitnessKey, System, Submission, RunAttempt, Heartbeat]
# A Result's figures, all of them computed by the verification (not the list's state: rank, review, audit).
FIGURES = ["division", "preset", "precision", "score_ops", "regulated_score_ops", "max_accuracy", "duration_s",
           "rules", "peak_flops", "efficiency", "trials_finished", "epochs", "rules_version", "spec_version",
           "verification_level", "system_id"]
ACCEPTED = {Submission.Status.VERIFIED, Submission.Status.PUBLISHED, Submission.Status.WITHDRAWN}


def copy_inputs() -> dict[str, int]:
    """Copy the inputs of verification from the source database into this (scratch) one, ids kept;
    submissions go back to `received` with nothing verified."""
    counts = {}
    for model in INPUTS:
        rows = list(model.objects.using(SOURCE).all().order_by("pk"))
        if model is Submission:
            for sub in rows:
                sub.status, sub.reasons, sub.verified_at = Submission.Status.RECEIVED, [], None
                sub.challenge, sub.challenged_at, sub.claim_token, sub.claimed_at, sub.attempts = [], None, "", None, 0
                sub.error = ""
        model.objects.bulk_create(rows, batch_size=1000)
        counts[model.__name__] = len(rows)
    # Rows were inserted with their ids: move PostgreSQL's sequences past them for the pipeline's own rows.
    connection = connections["default"]
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), INPUTS):
            cursor.execute(sql)
    return counts


def reverify_all() -> tuple[int, int]:
    """Run the pipeline on every submission with a stored bundle, in upload order: (verified, skipped)."""
    done = skipped = 0
    for pk, name in Submission.objects.order_by("created_at", "pk").values_list("pk", "bundle"):
        if not name:
            skipped += 1  # generated demo data: no bundle to verify
            continue
        pipeline.run(pk)
        done += 1
    return done, skipped


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def _checks(result: Result) -> dict[str, bool]:
    return {c["name"]: bool(c["passed"]) for c in (result.report or {}).get("checks", [])}


def differences(stored: Submission, rebuilt: Submission) -> list[str]:
    """How the rebuilt submission differs from the stored one (empty: the same)."""
    was, now = stored.status in ACCEPTED, rebuilt.status in ACCEPTED
    if was != now:
        return [f"status {stored.status} stored, {rebuilt.status} rebuilt"]
    if not was:
        old = sorted(r["check"] for r in stored.reasons or [])
        new = sorted(r["check"] for r in rebuilt.reasons or [])
        return [] if old == new else [f"refused by {old} stored, by {new} rebuilt"]
    a = Result.objects.using(SOURCE).filter(submission_id=stored.pk).first()
    b = Result.objects.filter(submission_id=rebuilt.pk).first()
    if a is None or b is None:
        return [f"result {'missing' if a is None else 'present'} stored, {'missing' if b is None else 'present'} "
                "rebuilt"]
    out = [f"{f}: {getattr(a, f)!r} stored, {getattr(b, f)!r} rebuilt" for f in FIGURES
           if not _same(getattr(a, f), getattr(b, f))]
    verdicts = _checks(a), _checks(b)
    out += [f"check {name}: {verdicts[0].get(name)} stored, {verdicts[1].get(name)} rebuilt"
            for name in sorted(verdicts[0].keys() | verdicts[1].keys()) if verdicts[0].get(name) != verdicts[1].get(name)]
    trials = (a.trials.using(SOURCE).count(), b.trials.count())
    if trials[0] != trials[1]:
        out.append(f"trials: {trials[0]} stored, {trials[1]} rebuilt")
    return out


def compare() -> dict[str, Any]:
    """Every stored submission with a bundle against its rebuilt twin."""
    rebuilt = {s.pk: s for s in Submission.objects.all()}
    report: dict[str, Any] = {"compared": 0, "differ": []}
    for stored in Submission.objects.using(SOURCE).exclude(bundle="").order_by("pk"):
        twin = rebuilt.get(stored.pk)
        found = differences(stored, twin) if twin is not None else ["not rebuilt"]
        report["compared"] += 1
        if found:
            report["differ"].append({"submission": stored.pk, "run_id": stored.run_id, "differences": found})
    return report
