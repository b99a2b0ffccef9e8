"""Server time and query count of every API list and CSV export with 10,000 (or --results) published results.

Against PostgreSQL (the database `aiperf_bench`, filled by `manage.py aiperf_demo_data` as
bench/site_latency.py fills it, and kept for the next run with --reuse-db). Each URL is asked
--repeat times by Django's test client in this process, with the page cache off
(AIPERF_PAGE_CACHE_S=0: the queries and the rendering alone, as the first reader after a change
meets them): the time is the whole request through every middleware, the view, the queries and
the renderer, without a network. Printed per URL: p50 and p95 milliseconds, the query count of one
request (the bound a test would set), rows and bytes; then each p95 as a ratio of the budget
(--budget-ms, default 1000 ms), and the worst.

    python bench/api_lists.py                  # fill aiperf_bench with 10,000 results, then measure
    python bench/api_lists.py --reuse-db       # measure the database a previous run filled
    python bench/api_lists.py --results 2000 --repeat 5

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust) — `bash scripts/services.sh start`.
Bounded: the fill has a deadline; each URL is asked --repeat times.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable

URLS = [
    "/api/v1/leaderboard/", "/api/v1/leaderboard/?format=csv", "/api/v1/leaderboard/?all=1&format=csv",
    "/api/v1/leaderboard/?workload=llm&all=1&format=csv",
    "/api/v1/results/", "/api/v1/results/?page_size=1000", "/api/v1/results/?format=csv",
    "/api/v1/systems/", "/api/v1/systems/?page_size=1000", "/api/v1/systems/?format=csv",
    "/api/v1/sites/", "/api/v1/sites/?format=csv",
    "/api/v1/editions/", "/api/v1/editions/?format=csv",
    "/api/v1/submissions/", "/api/v1/submissions/?page_size=1000", "/api/v1/submissions/?format=csv",
    "/api/v1/log/entries/?start=0&end=1000",
    "/api/schema/",
]


def fill(args: argparse.Namespace, env: dict[str, str]) -> None:
    import psycopg

    with psycopg.connect(f"{args.pg}/postgres", autocommit=True, connect_timeout=5) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [args.db]).fetchone()
        if exists and not args.reuse_db:
            admin.execute(f'DROP DATABASE "{args.db}" WITH (FORCE)')
            exists = None
        if not exists:
            admin.execute(f'CREATE DATABASE "{args.db}"')
    manage = [PY, "manage.py"]
    subprocess.run(manage + ["migrate", "-v0"], env=env, cwd=REPO, check=True, timeout=600)
    if not (exists and args.reuse_db):
        t0 = time.perf_counter()
        out = subprocess.run(manage + ["aiperf_demo_data", "--results", str(args.results), "--force"], env=env,
                             cwd=REPO, check=True, timeout=1800, capture_output=True, text=True).stdout
        print(out.strip().splitlines()[-1] if out.strip() else "", f"({time.perf_counter() - t0:.0f} s)")
    with psycopg.connect(f"{args.pg}/{args.db}", autocommit=True, connect_timeout=5) as db:
        db.execute("VACUUM ANALYZE")  # what autovacuum does after a bulk load


def measure(args: argparse.Namespace) -> int:
    """In a process whose settings point at the bench database: every URL, --repeat times."""
    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from leaderboard.models import Result, Submission, System

    print(f"{Result.objects.live().count()} published results, {System.objects.count()} systems, "
          f"{Submission.objects.count()} submissions; page cache off; {args.repeat} requests per URL")
    client = Client()
    print(f"{'URL':52} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'kB':>8} {'p95/budget':>11}")
    worst = 0.0
    for url in URLS:
        client.get(url)  # the first request pays for imports and the connection
        times, queries, size = [], 0, 0
        for _ in range(args.repeat):
            with CaptureQueriesContext(connection) as ctx:
                started = time.perf_counter()
                response = client.get(url)
                content = response.content if not response.streaming else b"".join(response.streaming_content)
                times.append((time.perf_counter() - started) * 1000)
            queries, size = len(ctx.captured_queries), len(content)
            if response.status_code != 200:
                print(f"{url}: HTTP {response.status_code}")
                return 1
        p50 = statistics.median(times)
        p95 = sorted(times)[max(0, round(0.95 * len(times)) - 1)]
        worst = max(worst, p95 / args.budget_ms)
        print(f"{url:52} {p50:8.0f} {p95:8.0f} {queries:8d} {size / 1024:8.0f} {p95 / args.budget_ms:11.2f}")
    print(f"worst p95 / budget ({args.budget_ms:.0f} ms): {worst:.2f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--budget-ms", type=float, default=1000.0)
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432", help="server URL, no database")
    ap.add_argument("--db", default="aiperf_bench")
    ap.add_argument("--reuse-db", action="store_true", help="measure the database a previous run filled")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        return measure(args)
    env = {**os.environ, "DATABASE_URL": f"{args.pg}/{args.db}", "DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(40),
           "ALLOWED_HOSTS": "testserver,127.0.0.1", "SECURE_SSL_REDIRECT": "0", "AIPERF_PAGE_CACHE_S": "0",
           "AIPERF_LOG_LEVEL": "WARNING", "DJANGO_SETTINGS_MODULE": "server.settings",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    try:
        fill(args, env)
    except Exception as exc:  # noqa: BLE001 - a database that cannot be reached or filled ends the bench
        print(f"could not prepare {args.db} at {args.pg}: {exc}")
        return 1
    argv = [PY, __file__, "--measure", "--repeat", str(args.repeat), "--budget-ms", str(args.budget_ms)]
    return subprocess.run(argv, env=env, cwd=REPO, timeout=3600).returncode


if __name__ == "__main__":
    sys.exit(main())
