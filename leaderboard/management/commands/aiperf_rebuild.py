"""Re-verify every stored bundle into a scratch database and report any result that differs.

    manage.py aiperf_rebuild --check           exit 1 when a result differs (each difference printed)
    manage.py aiperf_rebuild --check --json    the report as JSON
    manage.py aiperf_rebuild --check --keep    keep the scratch database (its URL is printed)

The disaster-recovery path beside pg_dump (docs/service.md "Backups and rebuilding"): the bundles are
the source of truth; this shows that the stored results are what they say. The work is done by a
child process (`--scratch`, leaderboard/rebuild.py) whose default database is the scratch one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from leaderboard import rebuild, translog


def source_url() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    if not db["ENGINE"].endswith("postgresql"):
        raise CommandError(f"aiperf_rebuild supports PostgreSQL and SQLite, not {db['ENGINE']}")
    return os.environ["DATABASE_URL"]


class Scratch:
    """An empty database beside the service's: a PostgreSQL database on the same server, or an SQLite file."""

    def __init__(self) -> None:
        self.postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
        if self.postgres:
            self.name = f"aiperf_rebuild_{uuid.uuid4().hex[:12]}"
            base, _, _ = source_url().partition("?")[0].rpartition("/")
            self.url = f"{base}/{self.name}"
        else:
            self.file = Path(tempfile.mkdtemp(prefix="aiperf-rebuild-")) / "scratch.sqlite3"
            self.url = f"sqlite:///{self.file}"

    def create(self) -> None:
        if self.postgres:
            with connection.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{self.name}"')

    def drop(self) -> None:
        if self.postgres:
            with connection.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        else:
            self.file.unlink(missing_ok=True)
            self.file.parent.rmdir()


class Command(BaseCommand):
    help = "Re-verify every stored bundle into a scratch database; report results that differ from the stored ones."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="compare and exit 1 when a result differs")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument("--keep", action="store_true", help="keep the scratch database")
        parser.add_argument("--scratch", metavar="REPORT", help=argparse.SUPPRESS)  # the child's own option

    def handle(self, *args, **opts):
        if opts["scratch"]:
            return self.child(Path(opts["scratch"]))
        if not opts["check"]:
            raise CommandError("say --check: re-verify every stored bundle into a scratch database and compare")
        scratch = Scratch()
        scratch.create()
        try:
            report = self.run_child(scratch)
        finally:
            if opts["keep"]:
                self.stderr.write(f"scratch database kept: {scratch.url}")
            else:
                scratch.drop()
        self.print(report, opts["json"])
        if report["differ"]:
            raise CommandError(f"{len(report['differ'])} of {report['compared']} result(s) differ from their bundles")
        if report["unlogged"]:
            raise CommandError(f"{len(report['unlogged'])} result(s) differ from what the list's log says of them")

    def run_child(self, scratch: Scratch) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="aiperf-rebuild-report-") as tmp:
            out = Path(tmp) / "report.json"
            env = {**os.environ, "DATABASE_URL": scratch.url, "AIPERF_REBUILD_SOURCE_URL": source_url(),
                   "DEBUG": "1" if settings.DEBUG else "0", "SECRET_KEY": settings.SECRET_KEY,
                   "CELERY_BROKER_URL": ""}  # nothing may reach the service's queues
            child = subprocess.run([sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "aiperf_rebuild",
                                    "--scratch", str(out)], env=env, capture_output=True, text=True)
            if child.returncode != 0 or not out.exists():
                raise CommandError(f"the rebuild failed:\n{child.stdout[-3000:]}\n{child.stderr[-3000:]}")
            return json.loads(out.read_text())

    def child(self, out: Path) -> None:
        if rebuild.SOURCE not in settings.DATABASES:
            raise CommandError("--scratch is the child of --check (AIPERF_REBUILD_SOURCE_URL is not set)")
        call_command("migrate", verbosity=0)
        copied = rebuild.copy_inputs()
        verified, skipped = rebuild.reverify_all()
        report = {"copied": copied, "reverified": verified, "skipped_without_bundle": skipped, **rebuild.compare(),
                  "unlogged": translog.unlogged(rebuild.SOURCE)}
        out.write_text(json.dumps(report))

    def print(self, report: dict[str, Any], as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(report, indent=1))
            return
        for item in report["differ"]:
            self.stdout.write(f"submission {item['submission']} (run {item['run_id']}):")
            for line in item["differences"]:
                self.stdout.write(f"  {line}")
        for line in report["unlogged"]:
            self.stdout.write(f"not in the list's log: {line}")
        self.stdout.write(f"{report['reverified']} bundle(s) re-verified into a scratch database, "
                          f"{report['skipped_without_bundle']} submission(s) without a bundle skipped; "
                          f"{len(report['differ'])} of {report['compared']} result(s) differ")

