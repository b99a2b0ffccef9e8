"""The service run for real in subprocesses: PostgreSQL, Redis, gunicorn and Celery workers.

Used by the test_e2e_* files. Each stack gets its own PostgreSQL database and its own Celery
queue, so stacks never see each other's data or messages. Processes are started in their own
session and stopped by their process group id, never by name.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.helpers import REPO, need_service

PG_URL = os.environ.get("AIPERF_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AIPERF_TEST_REDIS", "redis://127.0.0.1:6379/14")
BIN = Path(sys.executable).parent


def postgres_ok() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_URL, connect_timeout=3):
            return True
    except Exception:  # noqa: BLE001
        return False


def redis_ok() -> bool:
    try:
        import redis

        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping())
    except Exception:  # noqa: BLE001
        return False


def require_services() -> None:
    need_service(postgres_ok(), f"PostgreSQL not reachable at {PG_URL}")
    need_service(redis_ok(), f"Redis not reachable at {REDIS_URL}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    """`pg_url`/`redis_url`: the servers to use (the shared ones by default; the fault tests pass private ones)."""

    def __init__(self, workdir: Path, *, pg_url: str = PG_URL, redis_url: str = REDIS_URL) -> None:
        self.workdir = workdir
        self.pg_url = pg_url
        self.redis_url = redis_url
        self.name = f"aiperf_e2e_{uuid.uuid4().hex[:10]}"
        base, _, _ = pg_url.rpartition("/")
        self.database_url = f"{base}/{self.name}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "CELERY_BROKER_URL": redis_url,
            "AIPERF_CELERY_QUEUE": self.name,
            "AIPERF_AUDIT_QUEUE": f"{self.name}-audit",
            "DEBUG": "1",
            "SECRET_KEY": "e2e-" + uuid.uuid4().hex,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "MEDIA_ROOT": str(workdir / "media"),
            "AIPERF_PUBLIC_URL": self.url,
            # A dead worker's message comes back after 5 s, and its claim is stale after 4 s.
            "CELERY_VISIBILITY_TIMEOUT": "5",
            "CELERY_UNACKED_RESTORE_INTERVAL": "1",
            "CELERY_UNACKED_RESTORE_THROTTLE": "1",
            # Tests SIGKILL workers: one killed inside its sweep must not hold the sweep's lock for minutes.
            "CELERY_UNACKED_MUTEX_EXPIRE": "2",
            "AIPERF_CLAIM_TIMEOUT_S": "4",
            "PYTHONUNBUFFERED": "1",
        }
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self, *, template: str | None = None) -> Stack:
        """Create the database (a copy of the database `template`, already migrated, if given) and start gunicorn."""
        import psycopg

        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"' + (f' TEMPLATE "{template}"' if template else ""))
        if template is None:
            self.manage("migrate", "--noinput")
        self.start_web()
        return self

    def start_web(self) -> None:
        """gunicorn on this stack's port (again, after `kill("web")`: a restart of the service)."""
        self.spawn("web", [str(BIN / "gunicorn"), "server.wsgi:application", "--bind", f"127.0.0.1:{self.port}",
                           "--workers", "2", "--timeout", "120"])
        self.wait_ready()

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name, signal.SIGTERM)
        try:
            import psycopg
            import redis

            with psycopg.connect(self.pg_url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            redis.Redis.from_url(self.redis_url, socket_connect_timeout=5).delete(self.name, f"{self.name}-audit")
        except Exception:  # noqa: BLE001 - cleanup is best effort
            pass

    def spawn(self, name: str, argv: list[str], **env: str) -> subprocess.Popen:
        log = self.workdir / f"{name}.log"
        self.logs[name] = log
        fh = open(log, "ab")
        proc = subprocess.Popen(argv, cwd=REPO, env={**self.env, **env}, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        fh.close()
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)  # the worker and its pool children (their own session)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def start_worker(self, name: str = "worker", *, verify_delay_s: float | None = None,
                     audit_delay_s: float | None = None, queue: str | None = None) -> subprocess.Popen:
        """A Celery worker on this stack's queue (or `queue`: e.g. its audit queue); `verify_delay_s`: one
        that sleeps that long inside each verification (tests/service/slow_worker.py), to be killed there;
        `audit_delay_s`: before each trial's re-evaluation."""
        program = [str(BIN / "celery"), "-A", "server", "worker"]
        if verify_delay_s is not None:
            program = [sys.executable, "-m", "tests.service.slow_worker", "verify", str(verify_delay_s)]
        elif audit_delay_s is not None:
            program = [sys.executable, "-m", "tests.service.slow_worker", "audit", str(audit_delay_s)]
        self.spawn(name, [*program, "-Q", queue or self.name, "--concurrency", "1", "--pool", "prefork",
                                 "-n", f"{name}-{uuid.uuid4().hex[:6]}@%h", "-l", "INFO"])
        return self._started(name, b" ready.")

    def start_beat(self, name: str = "beat") -> subprocess.Popen:
        """Celery beat with this stack's schedule (server/settings.py; AIPERF_*_EVERY_S in its environment)."""
        self.spawn(name, [str(BIN / "celery"), "-A", "server", "beat", "-l", "INFO",
                                 "-s", str(self.workdir / f"{name}-schedule"), "--pidfile", ""])
        return self._started(name, b"beat: Starting")

    def _started(self, name: str, marker: bytes, timeout: float = 60) -> subprocess.Popen:
        """The process `name` once its log shows `marker`."""
        proc = self.procs[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {self.log(name)}")
            if marker in self.logs[name].read_bytes():
                return proc
            time.sleep(0.2)
        raise RuntimeError(f"{name} not started after {timeout} s: {self.log(name)}")

    def log(self, name: str) -> str:
        path = self.logs.get(name)
        return path.read_text(errors="replace")[-4000:] if path and path.exists() else ""

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"{self.url}/readyz", timeout=2)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"service not ready: {self.log('web')}")

    # ---- commands ------------------------------------------------------------------------------
    def manage(self, *args: str) -> subprocess.CompletedProcess:
        out = subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=self.env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, f"manage.py {' '.join(args)}: {out.stdout}\n{out.stderr}"
        return out

    def runner(self, *args: str, config: Path | None = None, check: bool = True,
               timeout: float = 600) -> subprocess.CompletedProcess:
        env = {**self.env}
        if config is not None:
            env["AIPERF_CONFIG_DIR"] = str(config)
        out = subprocess.run([str(BIN / "aiperf-runner"), *args], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=timeout)
        if check:
            assert out.returncode == 0, f"aiperf-runner {' '.join(args)}: rc {out.returncode}\n{out.stdout}\n{out.stderr}"
        return out

    def new_site(self, name: str, country: str) -> tuple[str, Path]:
        """Create a site (manage.py), make its key (keygen) and register it (aiperf-runner register)."""
        token = self.manage("aiperf_site", "create", name, "--country", country).stdout.strip()
        config = self.workdir / f"config-{name.replace(' ', '-')}"
        self.runner("keygen", config=config)
        self.runner("register", "--server", self.url, "--token", token, config=config)
        return token, config

    def submit(self, run: Path, token: str, config: Path, *extra: str) -> dict[str, Any]:
        out = self.runner("submit", str(run), "--server", self.url, "--token", token, "--json", *extra,
                          config=config, check=False)
        assert out.stdout, out.stderr
        return json.loads(out.stdout)

    def get(self, path: str, token: str | None = None) -> Any:
        """GET an API path, anonymously or as the site of `token` (which alone reads its refusals' messages and
        a submission's `error`)."""
        r = httpx.get(f"{self.url}{path}", timeout=30,
                      headers={"Authorization": f"Token {token}"} if token else None)
        r.raise_for_status()
        return r.json()

    def sql(self, query: str, *params: Any) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.database_url) as conn:
            return conn.execute(query, params).fetchall()


@contextmanager
def witnessed_stack(workdir: Path, **env: str) -> Iterator[Stack]:
    """A started stack with a witness key and one Celery worker (`env` added to its environment); stopped after."""
    require_services()
    s = Stack(workdir)
    s.env.update({"AIPERF_WITNESS_KEY_FILE": str(workdir / "witness_key.pem"), **env})
    try:
        s.start()
        s.manage("aiperf_witness_key", "create")
        s.start_worker("worker")
        yield s
    finally:
        s.stop()


WITNESS_CHECKS = ("witness.token", "witness.receipts", "witness.coverage", "witness.timeline")


def verified_checks(stack: Stack, sub: dict[str, Any], timeout: float = 180) -> dict[str, dict[str, Any]]:
    """Wait until the submission `sub` (submit --json) is verified (failing if it is rejected or still
    waits after `timeout`); its report's checks by name, read from the database (a result whose audit
    waits is not on the public list yet)."""
    deadline = time.monotonic() + timeout
    while sub["status"] not in ("verified", "rejected") and time.monotonic() < deadline:
        time.sleep(1)
        sub = {**stack.get(f"/api/v1/submissions/{sub['submission']}/"), "submission": sub["submission"]}
    assert sub["status"] == "verified", sub
    ((report,),) = stack.sql("SELECT report FROM leaderboard_result WHERE submission_id = %s", sub["submission"])
    return {c["name"]: c for c in (json.loads(report) if isinstance(report, str) else report)["checks"]}


def assert_witnessed(checks: dict[str, dict[str, Any]]) -> None:
    assert all(checks[name]["passed"] for name in WITNESS_CHECKS), {n: checks[n]["message"] for n in WITNESS_CHECKS}
