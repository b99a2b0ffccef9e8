"""An audit whose task keeps dying is not delivered without end: each delivery that starts the work is counted
(Result.audit_attempts), and past AIPERF_AUDIT_MAX_ATTEMPTS the audit stays pending with a message for the list's
maintainers instead of running again; `manage.py aiperf_audit` (again) starts the count anew."""

from __future__ import annotations

import pytest

from leaderboard import audit
from leaderboard.models import Result


class WorkerDied(BaseException):
    """What a killed worker looks like from inside: the work never returns."""


@pytest.fixture
def challenged(db, monkeypatch, settings):
    from devdata import demo

    settings.AIPERF_AUDIT_MAX_ATTEMPTS = 2
    demo.generate(3)
    result = Result.objects.order_by("pk").first()
    Result.objects.filter(pk=result.pk).update(audit=Result.Audit.PENDING)
    result.submission.challenge, result.submission.bundle = ["t0001"], "bundles/never-read.tar.gz"
    result.submission.save(update_fields=["challenge", "bundle"])
    monkeypatch.setattr(audit, "complete", lambda sub: True)
    monkeypatch.setattr(audit, "data_dir", lambda preset: ("/nowhere", None))
    started = []

    def dies(path):
        started.append(path)
        raise WorkerDied

    monkeypatch.setattr(audit.bundles, "extracted", dies)
    return result, started


def test_an_audit_that_never_finishes_stops_after_its_attempts(challenged):
    result, started = challenged
    for _ in range(2):
        with pytest.raises(WorkerDied):
            audit.run(result.submission_id)
    assert audit.run(result.submission_id) == Result.Audit.PENDING
    assert len(started) == 2  # the third delivery did not start the work
    stored = Result.objects.get(pk=result.pk)
    assert stored.audit == Result.Audit.PENDING and stored.audit_attempts == 3
    assert "started 2 times and never finished" in stored.audit_report["message"]
    with pytest.raises(WorkerDied):  # a maintainer's run starts again
        audit.run(result.submission_id, again=True)
    assert len(started) == 3 and Result.objects.get(pk=result.pk).audit_attempts == 1
