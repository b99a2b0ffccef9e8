"""Without a broker (make demo's service: tasks run in the web process) an audit runs on a thread of its own, once
at a time per submission: an AIPerf-LLM audit that trains trials again took minutes inside the upload's request,
past the client's timeout, and each retried upload started another audit of the same submission."""

from __future__ import annotations

import threading
import time

from leaderboard import tasks


def test_the_audit_runs_beside_the_request_and_once_at_a_time(settings, monkeypatch) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True
    release, runs = threading.Event(), []

    def slow_audit(submission_id: int) -> str:
        runs.append(submission_id)
        release.wait(10)
        return "passed"

    monkeypatch.setattr(tasks.audit, "run", slow_audit)
    started = time.monotonic()
    for _ in range(3):  # the upload that completed the challenge, and two retries of it
        tasks.enqueue_audit(7)
    assert time.monotonic() - started < 1.0  # the request does not wait for the audit
    deadline = time.monotonic() + 5
    while not runs and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runs == [7]
    release.set()
    deadline = time.monotonic() + 5
    while 7 in tasks._auditing and time.monotonic() < deadline:
        time.sleep(0.01)
    assert 7 not in tasks._auditing
    tasks.enqueue_audit(7)  # a later answer (a maintainer's new evidence) audits again
    deadline = time.monotonic() + 5
    while len(runs) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runs == [7, 7]
