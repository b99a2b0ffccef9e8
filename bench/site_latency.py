"""Server time of the list page, a result page and the API list with 10,000 (or --results) published results.

Against PostgreSQL (a throwaway database, dropped at the end) and gunicorn with 2 sync workers on
127.0.0.1, a second process runs 20 concurrent clients for 30 s against each URL in turn:

  /                       the ranked list (first page of 100 rows, default sort)
  /results/<id>           the page of the top official result (4 charts, the verification report)
  /api/v1/leaderboard/    the API list (first page)
  /?workload=llm          AIPerf-LLM's list (the demo's LLM results: a tenth as many, at most 50)
  /statistics             shares, totals and editions (each system counted once)

Server time is Django's own time per request, read from the `Server-Timing: app;dur=<ms>` header that
server.timing.ServerTimingMiddleware adds when AIPERF_SERVER_TIMING=1 (first in the middleware stack, so
it covers every middleware, the view, the queries and the template). The database is filled by
`manage.py aiperf_demo_data` (devdata/demo.py). Client latency on loopback is printed beside it;
with 20 clients and 2 workers it is mostly queueing. Printed ratios: each page's median server time
against the API list's (the peer), and each p95 against the budget (--budget-ms, default 500 ms).
`--page-cache both` (default) serves every URL with the page cache off (AIPERF_PAGE_CACHE_S=0: queries and
rendering alone), then on (leaderboard/listcache.py), and prints the ratio; `--cache-url redis://...` is the
served site's CACHE_URL (as in production; per-process memory without one).

    python bench/site_latency.py                         # the defaults above
    python bench/site_latency.py --results 2000 --duration 10 --keep-db
    python bench/site_latency.py --reuse-db              # skip filling when aiperf_bench already holds them
    python bench/site_latency.py --results 100000 --budget-ms 50 --cache-url redis://127.0.0.1:6379/13

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust) — `bash scripts/services.sh start`.
Bounded: every phase has a deadline, every request a timeout; loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable


# ---- the client process ----------------------------------------------------------------------------

def client_main(url: str, clients: int, duration: float, out: str) -> int:
    deadline = time.monotonic() + duration
    lock = threading.Lock()
    samples: list[tuple[float, float | None, int]] = []  # client ms, server ms, status

    def worker() -> None:
        local = []
        while time.monotonic() < deadline:
            start = time.perf_counter()
            status, server = 0, None
            try:
                with urllib.request.urlopen(url, timeout=60) as resp:
                    resp.read()
                    status = resp.status
                    timing = resp.headers.get("Server-Timing", "")
            except urllib.error.HTTPError as exc:
                status, timing = exc.code, exc.headers.get("Server-Timing", "")
            except OSError:
                status, timing = -1, ""
            ms = (time.perf_counter() - start) * 1000.0
            for part in timing.split(","):
                name, _, rest = part.strip().partition(";")
                if name == "app" and rest.startswith("dur="):
                    server = float(rest[4:])
            local.append((ms, server, status))
        with lock:
            samples.extend(local)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=duration + 90)
    Path(out).write_text(json.dumps({"url": url, "duration": duration, "samples": samples}))
    return 0


# ---- orchestration ---------------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[k]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd: list[str], env: dict[str, str], timeout: float) -> str:
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc.stdout


def admin_connect(base: str):
    import psycopg

    return psycopg.connect(f"{base}/postgres", autocommit=True, connect_timeout=5)


def measure(args: argparse.Namespace, env: dict[str, str], tmp: Path, result_id: int) -> dict[str, dict[str, float]]:
    """Start gunicorn with `env`, warm it, run the clients against each URL in turn; stats per URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    gunicorn = subprocess.Popen(
        [PY, "-m", "gunicorn", "server.wsgi:application", "--workers", str(args.workers), "--bind",
         f"127.0.0.1:{port}", "--timeout", "120", "--log-level", "warning"],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=5).read()
                break
            except OSError:
                if gunicorn.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"gunicorn did not start:\n{gunicorn.stderr.read() if gunicorn.stderr else ''}") from None
                time.sleep(0.3)

        urls = {"/": "/", "/results/<id>": f"/results/{result_id}", "/api/v1/leaderboard/": "/api/v1/leaderboard/",
                "/?workload=llm": "/?workload=llm", "/statistics": "/statistics"}
        for path in urls.values():  # warm both workers (imports, connections, template caches)
            for _ in range(4 * args.workers):
                urllib.request.urlopen(base + path, timeout=120).read()

        print(f"gunicorn: {args.workers} sync workers on 127.0.0.1:{port}; {args.clients} concurrent clients in a "
              f"second process, {args.duration:.0f} s per URL; CONN_MAX_AGE=60, DEBUG=0, "
              f"AIPERF_PAGE_CACHE_S={env['AIPERF_PAGE_CACHE_S']}")
        stats = {}
        for name, path in urls.items():
            out = tmp / f"client-{time.monotonic_ns()}.json"
            subprocess.run([PY, __file__, "--client", base + path, "--clients", str(args.clients), "--duration",
                            str(args.duration), "--out", str(out)], check=True, timeout=args.duration + 180)
            data = json.loads(out.read_text())
            samples = data["samples"]
            ok = [s for s in samples if s[2] == 200]
            server = [s[1] for s in ok if s[1] is not None]
            client = [s[0] for s in ok]
            stats[name] = {"n": len(samples), "errors": len(samples) - len(ok), "rps": len(ok) / args.duration,
                           "server_median": statistics.median(server) if server else float("nan"),
                           "server_p95": pct(server, 0.95), "client_median": pct(client, 0.5),
                           "client_p95": pct(client, 0.95)}
        return stats
    finally:
        gunicorn.terminate()
        try:
            gunicorn.wait(timeout=30)
        except subprocess.TimeoutExpired:
            gunicorn.kill()


def report(stats: dict[str, dict[str, float]], args: argparse.Namespace, label: str) -> None:
    print()
    print(f"-- {label}: server time = Django's time per request from the Server-Timing header; "
          "client = latency seen by the client on loopback (includes queueing)")
    print(f"{'URL':<24}{'requests':>9}{'errors':>7}{'req/s':>8}{'server median':>15}{'server p95':>12}"
          f"{'client median':>15}{'client p95':>12}")
    for name, s in stats.items():
        print(f"{name:<24}{s['n']:>9}{s['errors']:>7}{s['rps']:>8.1f}{s['server_median']:>13.1f}ms"
              f"{s['server_p95']:>10.1f}ms{s['client_median']:>13.1f}ms{s['client_p95']:>10.1f}ms")
    print()
    peer = stats["/api/v1/leaderboard/"]["server_median"]
    for name, s in stats.items():
        print(f"{name:<24} median / API list median = {s['server_median'] / peer:5.2f}   "
              f"p95 / {args.budget_ms:.0f} ms budget = {s['server_p95'] / args.budget_ms:5.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--results", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds per URL")
    ap.add_argument("--workers", type=int, default=2, help="gunicorn sync workers")
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432", help="server URL, no database")
    ap.add_argument("--db", default="aiperf_bench")
    ap.add_argument("--keep-db", action="store_true", help="do not drop the database at the end")
    ap.add_argument("--reuse-db", action="store_true", help="keep an existing database that holds the results")
    ap.add_argument("--budget-ms", type=float, default=500.0, help="p95 server-time budget the ratios compare with")
    ap.add_argument("--page-cache", choices=["off", "on", "both"], default="both",
                    help="AIPERF_PAGE_CACHE_S=0 / 300 for the anonymous pages (leaderboard/listcache.py); both: off, then on")
    ap.add_argument("--cache-url", default=os.environ.get("CACHE_URL", ""),
                    help="CACHE_URL of the served site (redis://...; default: $CACHE_URL, else per-process memory)")
    args = ap.parse_args()
    if args.client:
        return client_main(args.client, args.clients, args.duration, args.out)

    try:
        admin = admin_connect(args.pg)
    except Exception as exc:  # noqa: BLE001 - any connection failure means the same thing here
        print(f"PostgreSQL not reachable at {args.pg} ({exc}); start it with `bash scripts/services.sh start`")
        return 1

    tmp = Path(tempfile.mkdtemp(prefix="aiperf-bench-"))
    env = {**os.environ, "DATABASE_URL": f"{args.pg}/{args.db}", "DEBUG": "0",
           "SECRET_KEY": secrets.token_urlsafe(40), "ALLOWED_HOSTS": "127.0.0.1,localhost",
           "STATIC_ROOT": str(tmp / "static"), "CONN_MAX_AGE": "60", "AIPERF_LOG_LEVEL": "WARNING",
           "AIPERF_SERVER_TIMING": "1", "DJANGO_SETTINGS_MODULE": "server.settings",
           "SECURE_SSL_REDIRECT": "0",  # plain HTTP on loopback (no proxy in front to terminate TLS)
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    manage = [PY, "manage.py"]
    try:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [args.db]).fetchone()
        if exists and not args.reuse_db:
            admin.execute(f'DROP DATABASE "{args.db}" WITH (FORCE)')
            exists = None
        if not exists:
            admin.execute(f'CREATE DATABASE "{args.db}"')
        t0 = time.perf_counter()
        run(manage + ["migrate", "-v0"], env, 600)
        have = run([PY, "-c", "import django; django.setup(); from leaderboard.models import Result; "
                    "print(Result.objects.live().count())"], env, 120).strip()
        if int(have) < args.results * 0.95 or not args.reuse_db:
            print(run(manage + ["aiperf_demo_data", "--results", str(args.results), "--force"], env, 1800).strip())
        # what autovacuum does to a table after a bulk load: fresh statistics and visibility map
        import psycopg

        with psycopg.connect(f"{args.pg}/{args.db}", autocommit=True, connect_timeout=5) as db:
            db.execute("VACUUM ANALYZE")
        run(manage + ["collectstatic", "--noinput", "-v0"], env, 600)
        live = run([PY, "-c", "import django; django.setup(); from leaderboard.models import Result; "
                    "r = Result.objects.live().filter(division='official').order_by('-score_ops').first() "
                    "or Result.objects.live().order_by('-score_ops').first(); "
                    "print(Result.objects.live().count(), r.pk, r.trials.count(), len(r.series.points))"],
                   env, 120).split()
        n_live, result_id, n_trials, n_points = (int(x) for x in live)
        print(f"database ready in {time.perf_counter() - t0:.0f} s: {n_live} published results on the live list; "
              f"result {result_id} has {n_trials} trials and {n_points} series points")

        modes = {"off": [False], "on": [True], "both": [False, True]}[args.page_cache]
        cache_env = {"CACHE_URL": args.cache_url} if args.cache_url else {}
        print(f"page cache: {args.cache_url or 'per-process memory (CACHE_URL unset)'}")
        ok = True
        runs = {}
        for cached in modes:
            label = "page cache on" if cached else "page cache off"
            stats = measure(args, {**env, **cache_env, "AIPERF_PAGE_CACHE_S": "300" if cached else "0"}, tmp,
                            result_id)
            report(stats, args, label)
            runs[label] = stats
            ok = ok and all(s["errors"] == 0 for s in stats.values())
        if len(runs) == 2:
            off, on = runs["page cache off"], runs["page cache on"]
            print()
            for name in off:
                print(f"{name:<24} p95 off / on = {off[name]['server_p95'] / on[name]['server_p95']:7.1f}")
        return 0 if ok else 1
    finally:
        if not args.keep_db:
            try:
                admin.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
            except Exception as exc:  # noqa: BLE001
                print(f"could not drop {args.db}: {exc}")
        admin.close()


if __name__ == "__main__":
    sys.exit(main())
