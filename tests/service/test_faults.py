"""Faults during verification, on real services: PostgreSQL restarted, Redis restarted, a worker killed, a full disk.

Each test runs gunicorn, Celery workers and Celery beat (its `resume_stuck` sweep every second)
against a PostgreSQL cluster and a Redis server of its own (tests/service/private_services.py: the
shared ones on 5432/6379 are never restarted), injects one fault, and ends with every submission
verified, or failed with a reason and then retried by the sweep; never with two results for one
submission, a lost bundle, or rows of a half-written result.

Skipped locally when the PostgreSQL or Redis programs are missing; a failure under
AIPERF_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devdata.runfactory import make_run
from tests.helpers import need_service
from tests.service.private_services import PrivatePostgres, PrivateRedis, private_servers
from tests.service.stack import Stack

pytestmark = [pytest.mark.services, pytest.mark.slow]

# Recovery comes from beat's sweep, not from Redis redelivering an unacknowledged message (an hour).
FAULT_ENV = {
    "CELERY_VISIBILITY_TIMEOUT": "3600",
    "AIPERF_CLAIM_TIMEOUT_S": "4",
    "AIPERF_RESUME_STUCK_EVERY_S": "1",
    "AIPERF_RESUME_RECEIVED_AFTER_S": "2",
}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[PrivatePostgres, PrivateRedis]]:
    with private_servers() as both:
        yield both


@dataclass
class Template:
    """A migrated database with one registered site (its token and key), copied for each test."""

    database: str
    token: str
    config: Path


@pytest.fixture(scope="module")
def template(servers, tmp_path_factory) -> Template:
    pg, rd = servers
    s = Stack(tmp_path_factory.mktemp("template"), pg_url=pg.url, redis_url=rd.url)
    s.start()
    try:
        token, config = s.new_site("Fault Lab", "CN")
    finally:
        s.kill("web")  # a template database must have no connection when it is copied
    return Template(s.name, token, config)


@pytest.fixture
def stack(servers, template, tmp_path) -> Iterator[Stack]:
    pg, rd = servers
    s = Stack(tmp_path, pg_url=pg.url, redis_url=rd.url)
    s.env.update(FAULT_ENV)
    try:
        s.start(template=template.database)
        yield s
    finally:
        for name in list(s.procs):
            s.kill(name)  # SIGKILL: nothing of a test's processes is worth a graceful stop
        s.stop()


def runs(stack: Stack, n: int) -> list[Path]:
    paths = []
    for i in range(n):
        path = stack.workdir / f"run-{i}"
        # Distinct epochs (timings): the runs are not copies of each other.
        make_run(path, slots=2, trials=4, seed=100 + i, start=1_764_000_000.0 + 1000.123 * i)
        paths.append(path)
    return paths


def submit(stack: Stack, template: Template, run: Path) -> int:
    """Upload without waiting for the verification: the submission's id."""
    out = stack.submit(run, template.token, template.config, "--no-wait")
    assert "submission" in out and out["status"] in ("received", "verifying"), out
    return out["submission"]


def status(stack: Stack, sub_id: int, token: str | None = None) -> dict:
    """The submission as the API shows it; with its site's token, its `error` too (shown to that site only)."""
    return stack.get(f"/api/v1/submissions/{sub_id}/", token)


def wait_done(stack: Stack, ids: list[int], token: str, timeout: float = 60) -> dict[int, dict]:
    """The submissions `ids` of the site of `token` once each is verified or rejected (as that site reads them)."""
    deadline = time.monotonic() + timeout
    subs: dict[int, dict] = {}
    while time.monotonic() < deadline:
        subs = {i: status(stack, i, token) for i in ids}
        if all(s["status"] in ("verified", "rejected") for s in subs.values()):
            return subs
        time.sleep(0.3)
    raise AssertionError(f"not done after {timeout} s: {[(i, s['status']) for i, s in subs.items()]}\n"
                         + "\n".join(f"--- {n}\n{stack.log(n)}" for n in stack.logs))


def wait_status(stack: Stack, sub_id: int, wanted: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if status(stack, sub_id)["status"] == wanted:
            return
        time.sleep(0.1)
    raise AssertionError(f"submission {sub_id} never {wanted}: {status(stack, sub_id)}")


def assert_whole(stack: Stack, ids: list[int]) -> None:
    """Every submission verified with exactly one result, its series and trials, and its bundle on disk."""
    rows = stack.sql("SELECT s.id, s.status, s.claim_token, s.bundle, s.sha256, "
                     "(SELECT count(*) FROM leaderboard_result r WHERE r.submission_id = s.id), "
                     "(SELECT count(*) FROM leaderboard_resultseries rs JOIN leaderboard_result r "
                     " ON rs.result_id = r.id WHERE r.submission_id = s.id), "
                     "(SELECT count(*) FROM leaderboard_trial t JOIN leaderboard_result r "
                     " ON t.result_id = r.id WHERE r.submission_id = s.id) "
                     "FROM leaderboard_submission s ORDER BY s.id")
    assert [r[0] for r in rows] == sorted(ids), rows  # no lost and no extra submission
    for sub_id, st, claim, bundle, sha, results, series, trials in rows:
        assert (st, claim, results, series) == ("verified", "", 1, 1), (sub_id, st, claim, results, series)
        assert trials == 4, (sub_id, trials)
        path = Path(stack.env["MEDIA_ROOT"]) / bundle
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sha, f"bundle of {sub_id} lost or damaged"
    # Every result and every trial belongs to one of them: nothing half-written is left over.
    assert stack.sql("SELECT count(*) FROM leaderboard_result") == [(len(ids),)]
    assert stack.sql("SELECT count(*) FROM leaderboard_trial") == [(4 * len(ids),)]


def test_postgres_restarted_while_verifying(stack, servers, template):
    pg, _ = servers
    (run,) = runs(stack, 1)
    stack.start_worker("slow-worker", verify_delay_s=3)
    stack.start_beat()
    sub_id = submit(stack, template, run)
    wait_status(stack, sub_id, "verifying")
    pg.restart()  # every open connection, the worker's among them, is cut while the task is inside the steps
    # The attempt fails on its dead connection, says so, gives its claim back, and the sweep queues it again
    # (the error shows while the second attempt, also 3 s long, runs).
    deadline = time.monotonic() + 30
    while not re.match(r"(OperationalError|InterfaceError): ", status(stack, sub_id, template.token)["error"]):
        assert time.monotonic() < deadline, (status(stack, sub_id, template.token), stack.log("slow-worker"))
        time.sleep(0.2)
    done = wait_done(stack, [sub_id], template.token)
    assert done[sub_id]["status"] == "verified" and done[sub_id]["error"] == "", done
    assert stack.sql("SELECT attempts FROM leaderboard_submission") == [(2,)]
    assert_whole(stack, [sub_id])


def test_redis_restarted_with_submissions_queued(stack, servers, template):
    _, rd = servers
    *first, last = runs(stack, 4)
    ids = [submit(stack, template, run) for run in first]
    assert stack.sql("SELECT count(*) FROM leaderboard_submission WHERE status = 'received'") == [(3,)]
    rd.stop()  # no persistence, as the project runs Redis: the three queued messages are gone when it is back
    # An upload while the broker is away is stored all the same; only its message is missing.
    started = time.monotonic()
    ids.append(submit(stack, template, last))
    assert time.monotonic() - started < 30
    rd.start()
    stack.start_worker("worker")
    stack.start_beat()
    done = wait_done(stack, ids, template.token)
    assert [s["status"] for s in done.values()] == ["verified"] * 4, [(s["status"], s["reasons"]) for s in done.values()]
    assert_whole(stack, ids)


def test_worker_killed_mid_verification(stack, template):
    (run,) = runs(stack, 1)
    stack.start_worker("slow-worker", verify_delay_s=30)
    sub_id = submit(stack, template, run)
    wait_status(stack, sub_id, "verifying")
    time.sleep(0.5)  # inside the steps
    stack.kill("slow-worker")  # SIGKILL to the worker and its pool child: its message stays unacknowledged
    assert stack.sql("SELECT count(*) FROM leaderboard_result") == [(0,)]
    stack.start_worker("worker")
    stack.start_beat()  # the sweep, not a redelivery (an hour away), takes the stale claim over
    done = wait_done(stack, [sub_id], template.token)
    assert done[sub_id]["status"] == "verified", done
    assert stack.sql("SELECT attempts FROM leaderboard_submission") == [(2,)]
    assert_whole(stack, [sub_id])


def test_media_folder_full(stack, template):
    media = Path(stack.env["MEDIA_ROOT"])
    media.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(media)], capture_output=True,
                             text=True)
    need_service(mounted.returncode == 0, f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        run, other = runs(stack, 2)
        sub_id = submit(stack, template, run)
        filler = media / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)  # until ENOSPC

        # An upload to the full disk is refused with its reason and leaves nothing behind.
        refused = stack.submit(other, template.token, template.config, "--no-wait")
        assert refused["status"] == "refused" and refused["reasons"][0]["check"] == "storage", refused
        assert stack.sql("SELECT count(*) FROM leaderboard_submission") == [(1,)]
        kept = Path(stack.sql("SELECT bundle FROM leaderboard_submission")[0][0]).name
        assert sorted(p.name for p in media.rglob("*") if p.is_file()) == sorted(["filler", kept])

        # A verification on the full disk fails with its reason, keeps the bundle, and is retried by the sweep.
        stack.start_worker("worker")
        stack.start_beat()
        deadline = time.monotonic() + 30
        while "No space left" not in status(stack, sub_id, template.token)["error"]:
            assert time.monotonic() < deadline, status(stack, sub_id, template.token)
            time.sleep(0.2)
        assert status(stack, sub_id)["status"] in ("received", "verifying")
        filler.unlink()
        done = wait_done(stack, [sub_id], template.token)
        assert done[sub_id]["status"] == "verified" and done[sub_id]["error"] == "", done
        assert stack.sql("SELECT attempts >= 2 FROM leaderboard_submission") == [(True,)]
        assert_whole(stack, [sub_id])
        assert not list((media / "tmp").iterdir())  # no upload or unpacked bundle left behind
    finally:
        for name in ("worker", "beat"):
            stack.kill(name)
        subprocess.run(["umount", "-l", str(media)], check=False)

