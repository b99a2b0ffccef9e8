"""How fast `verify()` reads the log of an N-slot, H-hour run, against just parsing it.

Generates (devdata/runfactory.py) a run of `--slots` slots over `--hours` hours (40 trials of
`--epochs` epochs per slot per 12 hours, unless `--trials` says otherwise) in a temporary directory,
or reuses the one `--keep` names, then, side by side:

  peer   read events.jsonl line by line and json.loads every line (nothing else, one process)
  verify spec.verify.verify(run_dir): hash chain, schema, every check, FLOPs from the graphs, series
         (the trials' files and a log of 64 MiB or more are read by `--workers` processes, the log
         in 32 MiB chunks folded a chunk at a time: spec/logchunks.py, epochscan.py, fastfold.py)

and prints the ratios verify / peer of wall time (target <= 1) and of CPU time (user + system of
every process, workers included), and each side's peak memory (the verifying process's own, and
the largest of its workers'). Each measurement runs in a fresh process, so its peak RSS is its own;
the fastest of `--repeat` alternating runs counts. Trials reuse `--archs` distinct architectures of
ResNet-50 size (~170 layers); the cost per distinct architecture (parse, validate, canonical hash,
FLOPs) is measured and printed separately, with what a run whose every trial is a new architecture
would add.

    python bench/verify_throughput.py                # 512 slots, 12 h: 20,480 trials, 1,024,000 epochs
    python bench/verify_throughput.py --slots 4096 --hours 12 --keep /tmp/big --repeat 2
                                                     # 163,840 trials, 8.2 million epochs, a 2.8 GiB log
    python bench/verify_throughput.py --scale 0.05   # quick

Measured on 2 CPUs (load average about 2 with the bench running), the fastest of 2 runs:
4,096 slots: json.loads 42.2 s wall (42.0 s CPU), verify 31.9 s wall (57.3 s CPU): 0.76x wall, 1.36x
CPU; peak RSS 900 MiB (verify), 264 MiB (each worker); 0.76x to 0.83x over three such runs.
512 slots: 0.93x wall, 1.72x CPU, 225 MiB.
Before the chunked fold the 4,096-slot log took 3.5x the parse's wall time (docs/score.md, "Cost").
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aiperf_runner.spec.graph import Graph  # noqa: E402
from aiperf_runner.spec.runio import RunDir  # noqa: E402
from aiperf_runner.spec.verify import verify  # noqa: E402

from devdata.runfactory import make_run  # noqa: E402

TARGET = 1.0
SERVICE_CHECKS = ("system.registered", "witness.")
"""Checks a synthetic run fails for want of the service's records, not for anything in its log."""


def resnet_sized(k: int, image_size: int = 224, classes: int = 1000) -> Graph:
    """A ResNet-like graph of about 170-290 layers; every k gives another architecture."""
    g = Graph([(3, image_size, image_size)], [])
    width = 16 + (k % 16)
    blocks = 40 + (k // 16) % 30
    x = g.add_layer("conv2d", [0], in_channels=3, filters=width, kernel_size=7, stride=2, padding=3)
    x = g.add_layer("batchnorm2d", [x], num_features=width)
    x = g.add_layer("relu", [x])
    x = g.add_layer("maxpool2d", [x], kernel_size=3, stride=2, padding=1)
    for b in range(blocks):
        y = g.add_layer("conv2d", [x], in_channels=width, filters=width, kernel_size=3,
                        stride=1, padding=1)
        y = g.add_layer("batchnorm2d", [y], num_features=width)
        y = g.add_layer("add", [x, y])
        x = g.add_layer("relu", [y])
        if b in (blocks // 3, 2 * blocks // 3):
            x = g.add_layer("maxpool2d", [x], kernel_size=2, stride=2, padding=0)
    x = g.add_layer("global_avgpool2d", [x])
    x = g.add_layer("dense", [x], in_units=width, units=classes)
    g.add_layer("softmax", [x])
    return g


def parse_only(path: Path) -> int:
    n = 0
    with open(path, "rb") as fh:
        for line in fh:
            json.loads(line)
            n += 1
    return n


def _measure(kind: str, run_dir: str, workers: int | None, conn: Any) -> None:
    """Child process: run one side once; send (CPU seconds, wall seconds, peak RSS bytes, result).

    CPU seconds (user + system, this process and the worker processes it waited for) measure the
    work done whatever else the machine is running; wall seconds are printed beside them.
    """
    import resource

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    gc.collect()
    c = cpu()
    t = time.perf_counter()
    result: Any
    if kind == "peer":
        result = parse_only(Path(run_dir) / "events.jsonl")
    else:
        report = verify(run_dir, workers=workers)
        result = {k: report[k] for k in ("integrity_ok", "epochs", "score_ops", "regulated_score_ops",
                                         "division", "trials_finished")}
        result["series"] = len(report["series"])
        result["failed"] = [c["name"] for c in report["checks"] if not c["passed"]]
    elapsed = time.perf_counter() - t
    _reap_forkserver()  # its workers' CPU time counts once it is waited for
    cpu_s = cpu() - c
    # Peak RSS: this process's own, and the largest of the worker processes it waited for.
    result = (result, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
    conn.send((cpu_s, elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, result))
    conn.close()


def _reap_forkserver() -> None:
    """Stop the forkserver (if one was started) and wait for it: the CPU time of the workers it
    forked, and waited for, then shows in this process's RUSAGE_CHILDREN."""
    try:
        from multiprocessing import forkserver

        forkserver._forkserver._stop()  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        pass


def measure(kind: str, run_dir: Path, workers: int | None) -> tuple[float, float, int, Any]:
    """One measurement in a fresh process, so that its peak RSS is its own."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_measure, args=(kind, str(run_dir), workers, child))
    proc.start()
    child.close()
    out = parent.recv()
    proc.join()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=512)
    ap.add_argument("--trials", type=int, default=None, help="trials (default: 40 per slot per 12 hours)")
    ap.add_argument("--epochs", type=int, default=50, help="epochs per trial")
    ap.add_argument("--hours", type=float, default=12.0, help="run length (sets the epoch duration)")
    ap.add_argument("--archs", type=int, default=256, help="distinct architectures the trials cycle through")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply slots and trials by this")
    ap.add_argument("--keep", type=Path, default=None, help="write the run here and keep it; a run already "
                                                             "there (events.jsonl) is measured as it is")
    ap.add_argument("--repeat", type=int, default=2, help="measurements of each side (the best counts)")
    ap.add_argument("--workers", type=int, default=None, help="verify(workers=...): processes analysing graphs "
                                                               "and reading the log (default one per CPU)")
    args = ap.parse_args()
    slots = max(1, round(args.slots * args.scale))
    trials = max(1, round((args.trials or args.slots * args.hours / 12 * 40) * args.scale))
    per_slot = -(-trials // slots)
    epoch_s = args.hours * 3600 / (per_slot * args.epochs) - 0.01

    tmp = None if args.keep else Path(tempfile.mkdtemp(prefix="aiperf-bench-verify-"))
    run_dir = args.keep or tmp / "run"
    try:
        t = time.perf_counter()
        reuse = (run_dir / "events.jsonl").is_file()
        fr = None if reuse else make_run(run_dir, slots=slots, trials=trials, epochs=args.epochs, epoch_seconds=epoch_s,
                      preset="imagenet", precision="bf16", accelerator_model="NVIDIA H100 80GB HBM3",
                      accelerator_count=8 * slots, devices_per_slot=8, declared_peak=8 * slots * 989.4e12,
                      archs=args.archs, graph_fn=resnet_sized, trial_logs=False, gap_s=1.0)
        gen_s = time.perf_counter() - t
        size = (run_dir / "events.jsonl").stat().st_size
        if fr is None:
            print(f"run: {run_dir} as it is, {size / 2**20:.0f} MiB log")
        else:
            print(f"run: {slots} slots, {fr.trials} trials, {fr.epochs} epochs, {fr.events} events, "
                  f"{size / 2**20:.0f} MiB log, {(fr.end - fr.start) / 3600:.2f} h, {args.archs} distinct "
                  f"architectures (generated in {gen_s:.0f} s)")

        # peer and verify alternately, each in a fresh process; the best of --repeat runs of each
        peer_runs, verify_runs = [], []
        for _ in range(args.repeat):
            peer_runs.append(measure("peer", run_dir, args.workers))
            verify_runs.append(measure("verify", run_dir, args.workers))
        peer_s, peer_wall, peer_rss, (lines, _) = min(peer_runs, key=lambda r: r[1])
        verify_s, verify_wall, verify_rss, (result, worker_rss) = min(verify_runs, key=lambda r: r[1])
        # What only the service can pass (a registered system, a witness's records) may fail here.
        failed = [name for name in result["failed"] if not name.startswith(SERVICE_CHECKS)]
        assert result["integrity_ok"] and not failed, result
        assert fr is None or result["epochs"] == fr.epochs

        # cost per distinct architecture (parse, validate, hash, FLOPs), measured on fresh files
        sample = min(args.archs, 64)
        rd = RunDir(run_dir)
        t = time.process_time()
        for i in range(sample):
            rd.trial_flops(f"t{i:04d}", "v2")
        per_arch = (time.process_time() - t) / sample

        ratio = verify_s / peer_s
        print(f"peer   json.loads of every line : {peer_s:8.2f} s CPU ({lines / peer_s:,.0f} lines/s; "
              f"wall {peer_wall:.2f} s), peak RSS {peer_rss / 2**20:.0f} MiB")
        print(f"verify (all checks + series)    : {verify_s:8.2f} s CPU ({lines / verify_s:,.0f} lines/s; "
              f"wall {verify_wall:.2f} s), peak RSS {verify_rss / 2**20:.0f} MiB "
              f"(+{(verify_rss - peer_rss) / 2**20:.0f} MiB over the peer's, "
              f"{(verify_rss - peer_rss) / max(result['epochs'], 1):.0f} bytes per epoch); "
              f"workers' peak RSS {worker_rss / 2**20:.0f} MiB each at most")
        wall_ratio = verify_wall / peer_wall
        print(f"ratio verify / peer, wall time  : {wall_ratio:8.2f}x  (target <= {TARGET:g}x: "
              f"{'met' if wall_ratio <= TARGET else 'NOT met'}; load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} CPUs, {args.workers or os.cpu_count()} workers)")
        print(f"ratio verify / peer, CPU time   : {ratio:8.2f}x  (every process's user + system time; "
              f"{'met' if ratio <= TARGET else 'NOT met'}; fastest of {args.repeat})")
        print(f"per distinct architecture       : {per_arch * 1e3:8.1f} ms (parse, validate, hash, FLOPs; one "
              f"process); if all {result['trials_finished']} trials were distinct: "
              f"+{per_arch * (result['trials_finished'] - args.archs):.0f} s "
              f"of CPU, spread over verify's worker processes")
        print(f"score {result['score_ops']:.4g} OPS, regulated {result['regulated_score_ops']:.4g}, "
              f"{result['series']} series points, division {result['division']}")
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
