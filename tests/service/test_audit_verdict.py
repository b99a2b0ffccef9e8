"""A failed audit and the rejection it causes are one transaction: a site polling its submission reads either a
pending audit on a verified submission or a rejected submission, never a failed audit on a submission still
`verified` (the runner's `submit` stops waiting at a decided audit and once reported that as the final state)."""

from __future__ import annotations

import pytest

from leaderboard import audit, pipeline
from leaderboard.models import Result, Submission

REASONS = [{"check": "audit.replay", "message": "the committed work is not what the segment does"}]


@pytest.fixture
def pending(db) -> Result:
    from devdata import demo

    demo.generate(3)
    result = Result.objects.order_by("pk").first()
    Result.objects.filter(pk=result.pk).update(audit=Result.Audit.PENDING)
    return result


def test_a_failed_audit_rejects_its_submission(pending) -> None:
    audit._fail(pending.submission, pending, {"trials": {}}, REASONS)
    sub = Submission.objects.get(pk=pending.submission_id)
    assert sub.status == Submission.Status.REJECTED and sub.reasons == REASONS
    assert not Result.objects.filter(pk=pending.pk, published=True).exists()  # gone, or kept off the list by an edition


def test_a_rejection_that_fails_leaves_the_audit_undecided(pending, monkeypatch) -> None:
    status = pending.submission.status

    def breaks(*args, **kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(pipeline, "_store_rejection", breaks)
    with pytest.raises(RuntimeError):
        audit._fail(pending.submission, pending, {"trials": {}}, REASONS)
    assert Result.objects.get(pk=pending.pk).audit == Result.Audit.PENDING  # the verdict went with it
    assert Submission.objects.get(pk=pending.submission_id).status == status
