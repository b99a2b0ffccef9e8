"""A private PostgreSQL cluster and a private Redis server, for tests that restart them.

The fault tests (test_faults_*.py) restart the database and the broker under a running stack; the
shared servers on 5432/6379 serve other tests and other people at the same time, so these tests
never touch them. Each server here is started on a free port in its own temporary directory (the
cluster as the `postgres` user when the tests run as root: initdb refuses root) and stopped by the
test that started it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import need_service
from tests.service.stack import free_port


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    return str(versions[-1] / name) if versions and (versions[-1] / name).exists() else None


class PrivatePostgres:
    """A throw-away cluster: trust auth, 127.0.0.1 only, its socket in its own directory."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="aiperf-pg-"))
        self.data = self.dir / "data"
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        # initdb and postgres refuse to run as root: run them as the postgres user there.
        self.user = "postgres" if os.geteuid() == 0 else None

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = list(argv)
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: rc {out.returncode}\n{out.stdout}\n{out.stderr}")
        return out

    def start(self) -> PrivatePostgres:
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self._run(str(_pg_bin("initdb")), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--no-sync", "-E", "UTF8")
        self.pg_ctl("start")
        return self

    def pg_ctl(self, action: str, *extra: str) -> None:
        opts = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir} "
                "-c fsync=off -c max_connections=100")
        self._run(str(_pg_bin("pg_ctl")), "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "-t", "60",
                  "-o", opts, action, *extra)

    def stop(self) -> None:
        self.pg_ctl("stop", "-m", "fast")

    def restart(self) -> None:
        """Stop (terminating every session: each client sees its connection die) and start again."""
        self.pg_ctl("restart", "-m", "fast")

    def log(self) -> str:
        path = self.dir / "log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def cleanup(self) -> None:
        self._run(str(_pg_bin("pg_ctl")), "-D", str(self.data), "-m", "immediate", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivateRedis:
    """A redis-server without persistence, as the project runs it (a restart loses what it held)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="aiperf-redis-"))
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> PrivateRedis:
        self.proc = subprocess.Popen(
            [str(shutil.which("redis-server")), "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--logfile", str(self.dir / "log")],
            start_new_session=True)
        import redis

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_connect_timeout=1).ping():
                    return self
            except redis.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError(f"redis-server on {self.port} did not answer")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        """SIGKILL and start again on the same port: whatever it held (queued messages) is gone."""
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def private_services_available() -> None:
    """Skip (locally) or fail (under AIPERF_REQUIRE_SERVICES=1) without the PostgreSQL and Redis programs."""
    need_service(_pg_bin("initdb") is not None and _pg_bin("pg_ctl") is not None,
                 "PostgreSQL programs (initdb, pg_ctl) not installed")
    need_service(shutil.which("redis-server") is not None, "redis-server not installed")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            need_service(False, "running as root without a postgres user to run a private cluster as")


@contextmanager
def private_servers() -> Iterator[tuple[PrivatePostgres, PrivateRedis]]:
    """A private PostgreSQL cluster and Redis server, removed afterwards."""
    private_services_available()
    pg, rd = PrivatePostgres(), PrivateRedis()
    try:
        pg.start()
        rd.start()
        yield pg, rd
    finally:
        rd.cleanup()
        pg.cleanup()
