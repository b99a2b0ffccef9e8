#!/usr/bin/env python
"""`make demo`: a short benchmark on this machine, submitted to a local AIPerf service.

1. A local service in embedded mode (SQLite file, verification in-process): migrate, the service's
   witness key, a demo site and its API token, the site key (keygen into var/demo-config), the dev
   server on 127.0.0.1:8000 in the background, the key registered, this machine registered as the
   CPU system "AIPerf demo".
2. A witnessed smoke run: `aiperf-runner run --preset smoke --slots 2 --duration 2m --system "AIPerf demo"`
   (a run token from the service, heartbeats, the service's receipts in the log).
3. `aiperf-runner submit`: signed, uploaded, verified by the service; the weights of the trials the
   service challenges uploaded and re-evaluated, the committed states it asks for uploaded and their
   segments re-executed (the audit); the result's URL printed.

The server keeps running afterwards so the URL can be opened; the script prints how to stop it.
Running `make demo` again reuses the server, the site and the key, and adds a new run.

Environment (all optional): AIPERF_DEMO_DURATION (default 2m), AIPERF_DEMO_SLOTS (2),
AIPERF_DEMO_PORT (8000), AIPERF_DEMO_HOME (var/: database, media, key, server log and pid),
AIPERF_DEMO_WORKLOAD (`image`, the default, or `llm`: an AIPerf-LLM run of the llm-smoke preset instead,
submitted to the same service and ranked on its AIPerf-LLM list).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HOME = Path(os.environ.get("AIPERF_DEMO_HOME") or REPO / "var").resolve()
CONFIG = HOME / "demo-config"
PIDFILE = HOME / "demo-server.pid"
LOGFILE = HOME / "demo-server.log"
SITE = "Demo site"
SYSTEM = "AIPerf demo"
DURATION = os.environ.get("AIPERF_DEMO_DURATION", "2m")
SLOTS = os.environ.get("AIPERF_DEMO_SLOTS", "2")
WORKLOAD = os.environ.get("AIPERF_DEMO_WORKLOAD", "image")
# (the run's arguments, what the demo calls it) of each workload
WORKLOADS = {"image": (["--preset", "smoke"], "smoke run"),
             "llm": (["--workload", "llm", "--preset", "llm-smoke"], "AIPerf-LLM run (llm-smoke)")}


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def service_env() -> dict[str, str]:
    """The embedded mode, whatever the calling shell has set for a production service."""
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")}
    env.update({
        "DATABASE_URL": f"sqlite:///{HOME / 'aiperf.sqlite3'}",
        "MEDIA_ROOT": str(HOME / "media"),
        "DEBUG": "1",
        "AIPERF_CONFIG_DIR": str(CONFIG),
        "AIPERF_WITNESS_KEY_FILE": str(HOME / "witness_key.pem"),
        "AIPERF_HEARTBEAT_INTERVAL_S": os.environ.get("AIPERF_HEARTBEAT_INTERVAL_S", "20"),
        "PYTHONUNBUFFERED": "1",
    })
    return env


def run(*argv: str, capture: bool = False) -> str:
    out = subprocess.run(list(argv), cwd=REPO, env=service_env(), text=True,
                         stdout=subprocess.PIPE if capture else None)
    if out.returncode != 0:
        sys.exit(f"demo: `{' '.join(argv)}` failed with exit status {out.returncode}")
    return out.stdout if capture else ""


def manage(*args: str, capture: bool = False) -> str:
    return run(sys.executable, "manage.py", *args, capture=capture)


def runner(*args: str, capture: bool = False) -> str:
    return run(str(BIN / "aiperf-runner"), *args, capture=capture)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def our_server() -> tuple[int, str] | None:
    """(pid, url) of the demo server a previous `make demo` left running, if it still answers."""
    try:
        pid_text, url = PIDFILE.read_text().split()
        pid = int(pid_text)
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return (pid, url) if answers(f"{url}/readyz") else None


def start_server() -> tuple[int, str]:
    running = our_server()
    if running is not None:
        say(f"reusing the demo server at {running[1]} (pid {running[0]})")
        return running
    port = int(os.environ.get("AIPERF_DEMO_PORT", "8000"))
    if not port_free(port):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            other = s.getsockname()[1]
        say(f"port {port} is taken by another program; using {other}")
        port = other
    url = f"http://127.0.0.1:{port}"
    log = open(LOGFILE, "ab")
    proc = subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                            cwd=REPO, env=service_env(), stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    PIDFILE.write_text(f"{proc.pid} {url}\n")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"demo: the server exited (status {proc.returncode}); see {LOGFILE}")
        if answers(f"{url}/readyz"):
            say(f"service running at {url} (pid {proc.pid}, log {LOGFILE})")
            return proc.pid, url
        time.sleep(0.3)
    os.kill(proc.pid, signal.SIGTERM)
    sys.exit(f"demo: the server did not answer within 60 s; see {LOGFILE}")


def site_token() -> str:
    """A fresh API token of the demo site (created on first use)."""
    listing = manage("aiperf_site", "list", capture=True)
    if any(line.startswith(f"{SITE} (") for line in listing.splitlines()):
        return manage("aiperf_site", "token", SITE, capture=True).strip()
    return manage("aiperf_site", "create", SITE, "--country", "CN", capture=True).strip()


def demo_system(url: str, token: str) -> None:
    """This machine, registered once as the demo site's CPU system and approved by the local list's
    maintainer (you: a list approves every system by hand)."""
    listed = [s for s in json.loads(runner("system", "list", "--json", capture=True) or "[]")
              if s.get("name") == SYSTEM]
    if not listed:
        say(f"registering this machine as the system {SYSTEM!r} (a CPU system: its peak is the CPU estimate)")
        runner("system", "add", "--name", SYSTEM, "--accelerator-model", "cpu", "--accelerators-per-node", "0",
               "--nodes", "1", "--facts-from", "here")  # the demo runs here, even on a SLURM login node
        listed = [s for s in json.loads(runner("system", "list", "--json", capture=True)) if s.get("name") == SYSTEM]
    system = listed[0]
    if system.get("status") == "pending":
        say(f"approving it as the list's maintainer: manage.py aiperf_system approve {system['id']} --reason ...")
        manage("aiperf_system", "approve", str(system["id"]), "--reason",
               "the demo's own machine, as `system add --facts-from here` found it", "--by", "demo")


def main() -> None:
    if WORKLOAD not in WORKLOADS:
        sys.exit(f"demo: AIPERF_DEMO_WORKLOAD={WORKLOAD!r} is not a workload (expected {' or '.join(WORKLOADS)})")
    preset_args, what = WORKLOADS[WORKLOAD]
    HOME.mkdir(parents=True, exist_ok=True)
    say("preparing the local service (SQLite, in-process verification)")
    manage("migrate", "--noinput", "-v", "0")
    manage("aiperf_witness_key", "create")
    token = site_token()
    if not (CONFIG / "site_key.pem").exists():
        say(f"making the demo site key in {CONFIG}")
        runner("keygen")
    pid, url = start_server()
    runner("register", "--server", url, "--token", token)  # saves the server and token in the config directory
    demo_system(url, token)

    runs = HOME / "runs" if os.environ.get("AIPERF_DEMO_HOME") else REPO / "runs"
    run_dir = runs / f"demo-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    say(f"witnessed {what}: aiperf-runner run {' '.join(preset_args)} --slots {SLOTS} --duration {DURATION} "
        f"--out {run_dir} --system '{SYSTEM}'")
    runner("run", *preset_args, "--slots", SLOTS, "--duration", DURATION, "--out", str(run_dir),
           "--system", SYSTEM, "--progress", "plain")

    say("submitting the run to the local service")
    out = subprocess.run([str(BIN / "aiperf-runner"), "submit", str(run_dir), "--server", url, "--token", token,
                          "--json", "--timeout", "600"], cwd=REPO, env=service_env(), text=True,
                         stdout=subprocess.PIPE)
    try:
        result = json.loads(out.stdout)
    except ValueError:
        sys.exit(f"demo: submit failed (exit status {out.returncode}): {out.stdout}")
    print()
    print(f"status:      {result['status']}")
    for reason in result.get("reasons") or []:
        print(f"  {reason.get('check')}: {reason.get('message')}")
    if result.get("score_ops") is not None:
        print(f"score:       {result['score_ops']:.4g} OPS (regulated {result['regulated_score_ops']:.4g} OPS)")
        standing = result.get("standing") or {}
        print(f"rank:        {result['rank']} in the {result['division']} division" if result.get("rank") else
              f"rank:        none ({result['division']} division): {standing.get('text') or 'not on the live list'}")
        because = [r["check"] for r in result.get("not_official_because") or []]
        if because:
            print(f"not official: {', '.join(because)} (the demo is a short {what}, so its result is in the "
                  f"{result.get('division')} division; the result page says why for each)")
    if result.get("challenge"):
        print(f"audit:       {result.get('audit') or '-'} (the weights of challenged trials "
              f"{', '.join(result['challenge'])} re-evaluated by the service)")
    if result.get("states"):
        print(f"work:        {len(result['states'])} committed training states uploaded; the service re-executed "
              "the segments it drew from them (the result page says how each ended)")
    if result.get("url"):
        print(f"result:      {result['url']}")
    query = "&".join(([f"workload={WORKLOAD}"] if WORKLOAD != "image" else []) +
                     ([f"division={result['division']}"] if result.get("division") == "open" else []))
    print(f"ranked list: {url}/" + (f"?{query}" if query else ""))
    print(f"API:         {url}/api/v1/   docs: {url}/api/docs/")
    print()
    print(f"The service keeps running in the background (pid {pid}). Stop it with:  kill {pid}")
    if result["status"] not in ("verified", "published"):
        sys.exit(1)


if __name__ == "__main__":
    main()
