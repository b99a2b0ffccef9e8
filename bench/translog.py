"""The list's transparency log at size: appends and proofs at 100,000 entries, check-list on 10,000 results.

Against PostgreSQL (a throwaway database, dropped at the end):

1. `manage.py aiperf_demo_data --results N` (default 10,000: each result logged as it is made), then the
   log filled with synthetic entries up to --entries (default 100,000) in bulk;
2. one append at that size (a result's row changed, the new head signed), --repeat times: median and p95
   against --append-budget-ms (the budget of a change to the list);
3. an inclusion proof and a consistency proof at that size, as the API makes them, against --proof-budget-ms;
4. `aiperf-runner check-list` against gunicorn (2 workers) serving that database: its time, and the time
   of merely downloading what it reads (the entries and the list, the peer it is compared with).

    python bench/translog.py
    python bench/translog.py --entries 20000 --results 2000

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust) — `bash scripts/services.sh start`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "runner")]
PY = sys.executable

CHILD = r"""
import json, random, statistics, sys, time
import django
django.setup()
from django.db import transaction
from leaderboard import translog
from leaderboard.models import Result

target, repeat = int(sys.argv[1]), int(sys.argv[2])
t0 = time.perf_counter()
while translog.size() < target:
    n = min(5000, target - translog.size())
    translog.append_many([({"event": "bench", "at": "2026-12-04T00:00:00+00:00", "by": "", "reason": str(i)}, None)
                          for i in range(n)])
fill = time.perf_counter() - t0
result = Result.objects.live().first()
appends = []
for i in range(repeat):
    Result.objects.filter(pk=result.pk).update(max_accuracy=0.5 + i / 1000)
    start = time.perf_counter()
    with transaction.atomic():
        translog.record(result, "bench")
    appends.append((time.perf_counter() - start) * 1000)
size = translog.size()
inclusion, consistency = [], []
rng = random.Random(1)
for _ in range(repeat):
    start = time.perf_counter()
    translog.tree(size).inclusion_path(rng.randrange(size), size)
    inclusion.append((time.perf_counter() - start) * 1000)
    start = time.perf_counter()
    translog.tree(size).consistency_proof(rng.randrange(1, size), size)
    consistency.append((time.perf_counter() - start) * 1000)
print(json.dumps({"size": size, "fill_s": fill, "append_ms": appends, "inclusion_ms": inclusion,
                  "consistency_ms": consistency}))
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(cmd: list[str], env: dict[str, str], timeout: float) -> str:
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd[:3])} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc.stdout


def check_list(base: str, config: Path) -> tuple[float, float, dict]:
    """(seconds of check-list, seconds of downloading what it reads, its verdict)."""
    import httpx

    os.environ["AIPERF_CONFIG_DIR"] = str(config)
    from aiperf_runner.client import listlog

    start = time.perf_counter()
    verdict = listlog.check(base)
    checked = time.perf_counter() - start
    start = time.perf_counter()
    with httpx.Client(base_url=base, timeout=120) as http:
        size = http.get("/api/v1/log/head/").json()["size"]
        for first in range(0, size, listlog.PAGE):
            http.get("/api/v1/log/entries/", params={"start": first, "end": first + listlog.PAGE}).raise_for_status()
        for rules in ("v2", "v1-compat"):
            page = 1
            while True:
                body = http.get("/api/v1/leaderboard/", params={"all": 1, "rules": rules, "page_size": listlog.PAGE,
                                                                "page": page}).json()
                if not body.get("next"):
                    break
                page += 1
    return checked, time.perf_counter() - start, verdict.as_json()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--results", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--append-budget-ms", type=float, default=50.0)
    ap.add_argument("--proof-budget-ms", type=float, default=50.0)
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    ap.add_argument("--db", default="aiperf_bench_log")
    args = ap.parse_args()
    import psycopg

    admin = psycopg.connect(f"{args.pg}/postgres", autocommit=True, connect_timeout=5)
    tmp = Path(tempfile.mkdtemp(prefix="aiperf-bench-log-"))
    env = {**os.environ, "DATABASE_URL": f"{args.pg}/{args.db}", "DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(40),
           "ALLOWED_HOSTS": "127.0.0.1,localhost", "AIPERF_LOG_LEVEL": "WARNING", "SECURE_SSL_REDIRECT": "0",
           "DJANGO_SETTINGS_MODULE": "server.settings", "AIPERF_LOG_KEY_FILE": str(tmp / "log_key.pem"),
           "AIPERF_PAGE_CACHE_S": "0", "STATIC_ROOT": str(tmp / "static")}
    try:
        admin.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{args.db}"')
        run([PY, "manage.py", "migrate", "-v0"], env, 600)
        start = time.perf_counter()
        print(run([PY, "manage.py", "aiperf_demo_data", "--results", str(args.results), "--force"], env, 3600).strip())
        print(f"demo data with its log entries: {time.perf_counter() - start:.1f} s")
        out = json.loads(run([PY, "-c", CHILD, str(args.entries), str(args.repeat)], env, 3600).splitlines()[-1])
        print(f"log filled to {out['size']:,} entries in {out['fill_s']:.1f} s")
        for name, budget in (("append_ms", args.append_budget_ms), ("inclusion_ms", args.proof_budget_ms),
                             ("consistency_ms", args.proof_budget_ms)):
            median, p95 = statistics.median(out[name]), pct(out[name], 0.95)
            print(f"{name[:-3]:<12} at {out['size']:,}: median {median:7.2f} ms, p95 {p95:7.2f} ms; "
                  f"p95 / budget ({budget:g} ms) = {p95 / budget:.2f}")
        port = 8000 + secrets.randbelow(1000)
        base = f"http://127.0.0.1:{port}"
        server = subprocess.Popen([PY, "-m", "gunicorn", "server.wsgi:application", "--workers", "2", "--bind",
                                   f"127.0.0.1:{port}", "--timeout", "300", "--log-level", "warning"],
                                  env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            import httpx

            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"{base}/healthz", timeout=5)
                    break
                except httpx.HTTPError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("gunicorn did not start") from None
                    time.sleep(0.3)
            checked, fetched, verdict = check_list(base, tmp / "reader")
            print(f"check-list: {checked:.1f} s for {verdict['size']:,} entries and {verdict['listed']:,} listed "
                  f"results (consistent: {verdict['consistent']}); downloading the same: {fetched:.1f} s; "
                  f"check-list / download = {checked / fetched:.2f}")
        finally:
            server.terminate()
            server.wait(timeout=30)
        return 0 if verdict["consistent"] else 1
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
        admin.close()


if __name__ == "__main__":
    sys.exit(main())
