"""The cost of witnessing to the controller: a witnessed simulated run at scale against its unwitnessed peer.

A local AIPerf service (the `make demo` one: SQLite, in-process verification, in a scratch home) issues
the run token and answers the heartbeats. The real controller, search and log run `--slots` simulated
slots (the `sim` backend) twice, witnessed and not, and the bench prints the CPU seconds witnessing took:
the heartbeat thread (signing, HTTP) plus the controller loop's heartbeat and receipt lines (with the
weights decisions each receipt's beacon makes), against the controller's whole CPU. Target: under 1 %.

    python bench/witness_cost.py --slots 512 --duration 180 --interval 60
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TARGET = 0.01


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slots", type=int, default=512)
    p.add_argument("--duration", type=float, default=180.0, help="seconds of run (default 180)")
    p.add_argument("--interval", type=float, default=60.0,
                   help="the service's heartbeat interval in seconds (default 60, the production default)")
    p.add_argument("--trial-s", type=float, default=60.0, help="seconds of the seed architecture's trial")
    p.add_argument("--epochs", type=int, default=2)
    return p.parse_args(argv)


def start_service(home: Path, interval: float) -> Any:
    """The demo's local service in `home`, with the site, key and a registered CPU system; the module."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update({"AIPERF_DEMO_HOME": str(home), "AIPERF_DEMO_PORT": str(port),
                       "AIPERF_HEARTBEAT_INTERVAL_S": str(interval)})
    sys.path.insert(0, str(REPO / "scripts"))
    import demo  # type: ignore[import-not-found]

    home.mkdir(parents=True, exist_ok=True)
    demo.manage("migrate", "--noinput", "-v", "0")
    demo.manage("aiperf_witness_key", "create")
    token = demo.site_token()
    demo.runner("keygen")
    _, url = demo.start_server()
    demo.runner("register", "--server", url, "--token", token)
    demo.demo_system(url, token)
    os.environ["AIPERF_CONFIG_DIR"] = str(demo.CONFIG)
    return demo


def run(args: argparse.Namespace, run_dir: Path, witnessed: bool, system: str) -> dict[str, Any]:
    from aiperf_runner.client.service import find_service, resolve_system
    from aiperf_runner.run.controller import Controller
    from aiperf_runner.rundir.config import RunConfig
    from controller_scale import ThreadClock, seed_flops_per_s  # type: ignore[import-not-found]

    options = {"flops_per_s": seed_flops_per_s("smoke", args.trial_s, args.epochs), "seed": 1}
    config = RunConfig(preset="smoke", slots=args.slots, duration_s=args.duration, backend="sim",
                       backend_options=options, epoch_budgets=[args.epochs] * 4, seed=1)
    service = registration = None
    if witnessed:
        service = find_service()
        registration = resolve_system(service, system)
    cpu0 = time.process_time()
    with ThreadClock() as clock:
        controller = Controller.create(config, run_dir, registration=registration, service=service)
        controller.run()
    out = {"process_cpu_s": time.process_time() - cpu0, "main_cpu_s": clock.cpu.get("MainThread", 0.0),
           "heartbeat_thread_s": 0.0, "loop_witness_s": 0.0, "heartbeats": 0}
    if controller.witnessing is not None and controller.witnessed_log is not None:
        out.update(heartbeat_thread_s=controller.witnessing.thread_cpu_s, heartbeats=controller.witnessing.sent,
                   loop_witness_s=controller.witnessed_log.loop_cpu_s)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aiperf-witness-bench-") as tmp:
        home = Path(tmp)
        demo = start_service(home / "service", args.interval)
        try:
            plain = run(args, home / "plain", False, demo.SYSTEM)
            witnessed = run(args, home / "witnessed", True, demo.SYSTEM)
        finally:
            pid = int(demo.PIDFILE.read_text().split()[0])
            os.kill(pid, 15)
    cost = witnessed["heartbeat_thread_s"] + witnessed["loop_witness_s"]
    share = cost / witnessed["process_cpu_s"]
    print(f"{args.slots} simulated slots, {args.duration:.0f} s, heartbeat interval {args.interval:.0f} s")
    print(f"{'':24} {'unwitnessed':>12} {'witnessed':>12}")
    print(f"{'controller process CPU':24} {plain['process_cpu_s']:>11.2f}s {witnessed['process_cpu_s']:>11.2f}s")
    print(f"{'  of which main thread':24} {plain['main_cpu_s']:>11.2f}s {witnessed['main_cpu_s']:>11.2f}s")
    print(f"heartbeats answered: {witnessed['heartbeats']}")
    print(f"witnessing CPU: heartbeat thread {witnessed['heartbeat_thread_s']:.3f} s + controller loop "
          f"{witnessed['loop_witness_s']:.3f} s = {cost:.3f} s")
    print(f"share of the controller's CPU: {share:.3%} (target under {TARGET:.0%})")
    return 0 if share < TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
