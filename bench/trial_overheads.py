"""Where a trial's time goes besides training: launch to first step, validation, checkpoints.

Runs short real benchmarks (the smoke preset, one slot, the real trial program) and reads the
trials' `aiperf-timing` lines (rundir/timings.py) from their stdout.log. Two arms, interleaved
(ABBA) in one invocation:

  sync    AIPERF_SYNC_CHECKPOINT=1: rank 0 writes, fsyncs and renames the checkpoint, and logs the
          epoch, while the training loop (and every other rank, at its next all-reduce) waits: before
  async   the default: the loop waits for a copy of the state in CPU memory; a thread writes it and
          then logs the epoch (train/ckptwriter.py): after

Printed per arm: the score (median of its runs, as `verify` computes it), launch -> first training step
(median over attempts, and its parts: the launch to the trial process, the process to model and data
built, to the first step done), and per epoch the
mean training, validation and checkpoint seconds (checkpoint: what the training loop waited,
the end-of-trial wait for the last write spread over the trial's epochs), the share of an epoch
lost to validation and to checkpoints, and the write's own seconds (in the thread when async).
Then the ratios sync / async. The presets' seed models are small (78 k parameters: a checkpoint is
a few ms); last, in this process, one checkpoint of an imagenet-sized state (`--state-mparams`,
25.6 M parameters with momentum, as ResNet-50's) is saved both ways: what the loop waits for.

    .venv/bin/python bench/trial_overheads.py                      # local backend, smoke: ABBA, 4 runs of 25 s
    .venv/bin/python bench/trial_overheads.py --pairs 1 --duration 20s --cold   # + an arm without the zygote
    .venv/bin/python bench/trial_overheads.py --slurm               # also on the local SLURM cluster
    .venv/bin/python bench/trial_overheads.py --preset fashion-mnist --duration 90s --pairs 1
    .venv/bin/python bench/trial_overheads.py --no-local --slurm-steps --state-mparams 0   # steps: cold/warm

`--cold` adds an arm with the local backend's zygote off (`warm_start=false`): every attempt a fresh
interpreter importing torch, as every SLURM job's processes still are. `--slurm` runs the same two
arms with `--backend slurm` against $SLURM_CONF (var/slurm/slurm.conf, scripts/slurm-cluster.sh,
when unset); without a cluster answering `sinfo` it says so and skips that part. `--slurm-steps` runs the
controller inside an allocation (`salloc --nodes=1 --exclusive`, `--backend slurm-steps`) with two arms: every
attempt a job step of its own (`cold`, the default) against attempts forked by a zygote step on the node
(`warm`, `--backend-opt warm_start=true`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "runner"))

from aiperf_runner.rundir import timings  # noqa: E402
from aiperf_runner.spec.verify import verify  # noqa: E402

FASHION = Path("/usr/share/datasets/fashion-mnist")
SLURM_OPTS = ("--backend-opt", "exclusive=false")


@dataclass
class Arm:
    name: str
    env: dict[str, str]
    extra: tuple[str, ...] = ()
    starts: list[dict[str, Any]] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    ends: list[dict[str, Any]] = field(default_factory=list)
    runs: int = 0
    scores: list[float] = field(default_factory=list)  # each run's score (GFLOP/s), as `verify` computes it


def run_once(arm: Arm, args: argparse.Namespace, backend: str, env: dict[str, str]) -> bool:
    """One benchmark run of `arm`; its trials' timing lines added to the arm."""
    work = Path(tempfile.mkdtemp(prefix="aiperf-trial-overheads-"))
    run_dir = work / "run"
    inside = ["salloc", "--nodes=1", "--exclusive", "--time=10"] if backend == "slurm-steps" else []
    argv = [*inside, sys.executable, "-m", "aiperf_runner", "run", "--preset", args.preset, "--slots", "1",
            "--duration", args.duration, "--out", str(run_dir), "--progress", "none", "--backend", backend,
            *arm.extra]
    if args.preset == "fashion-mnist":
        argv += ["--data", str(FASHION)]
    proc = subprocess.run(argv, env={**env, **arm.env}, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        print(f"  {arm.name}: the run failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
        return False
    arm.scores.append(verify(run_dir)["score_ops"] / 1e9)
    for out in sorted(run_dir.glob("trials/*/stdout.log")):
        for fact in timings.read(out):
            {"start": arm.starts, "epoch": arm.epochs, "end": arm.ends}.get(fact.get("kind"), []).append(fact)
    arm.runs += 1
    if args.keep:
        print(f"  kept {run_dir}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return True


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def figures(arm: Arm) -> dict[str, float]:
    s, e = arm.starts, arm.epochs
    parts = [f for f in s if f.get("process_at") and f.get("ready_at")]
    n_epochs = max(len(e), 1)
    end_wait = sum(f["checkpoint_s"] for f in arm.ends)
    train = _mean([f["train_s"] for f in e])
    val = _mean([f["val_s"] for f in e])
    ckpt = (sum(f["checkpoint_s"] for f in e) + end_wait) / n_epochs
    return {"score": _median(arm.scores), "attempts": len(s), "epochs": len(e), "startup_s": _median([f["startup_s"] for f in s]),
            "to_process_s": _median([f["process_at"] - f["launched_at"] for f in parts]),
            "to_ready_s": _median([f["ready_at"] - f["process_at"] for f in parts]),
            "first_step_s": _median([f["first_step_at"] - f["ready_at"] for f in parts]),
            "train_s": train, "val_s": val, "checkpoint_s": ckpt, "end_wait_s": end_wait / n_epochs,
            "write_s": _mean([w for f in arm.ends for w in f["writes_s"]]),
            "val_share": val / (train + val + ckpt), "checkpoint_share": ckpt / (train + val + ckpt)}


ROWS = (("score", "score (GFLOP/s, median of the runs)", "{:.3f}"), ("attempts", "attempts", "{:.0f}"), ("epochs", "epochs", "{:.0f}"),
        ("startup_s", "launch -> first step (s, median)", "{:.3f}"),
        ("to_process_s", "  launch -> trial process", "{:.3f}"),
        ("to_ready_s", "  process -> model, data built", "{:.3f}"),
        ("first_step_s", "  built -> first step done", "{:.3f}"),
        ("train_s", "training per epoch (s)", "{:.4f}"), ("val_s", "validation per epoch (s)", "{:.4f}"),
        ("checkpoint_s", "checkpoint per epoch, loop waits (s)", "{:.5f}"),
        ("end_wait_s", "  of which at the trial's end", "{:.5f}"),
        ("write_s", "checkpoint write itself (s)", "{:.5f}"),
        ("val_share", "share of an epoch: validation", "{:.2%}"),
        ("checkpoint_share", "share of an epoch: checkpoint", "{:.2%}"))


def report(title: str, arms: list[Arm]) -> None:
    figs = {a.name: figures(a) for a in arms}
    print(f"\n{title}")
    print(f"  {'':40s}" + "".join(f"{a.name:>12s}" for a in arms))
    for key, label, fmt in ROWS:
        print(f"  {label:40s}" + "".join(f"{fmt.format(figs[a.name][key]):>12s}" for a in arms))
    sync, after = figs.get("sync"), figs.get("async")
    if sync and after:
        def ratio(key: str) -> str:
            return f"{sync[key] / after[key]:.2f}x" if after[key] > 0 else "inf"
        print(f"  sync / async: checkpoint per epoch {ratio('checkpoint_s')}, validation per epoch "
              f"{ratio('val_s')}, training per epoch {ratio('train_s')}, launch -> first step {ratio('startup_s')}")
    if "cold" in figs and after:
        print(f"  cold / warm (zygote): launch -> first step {figs['cold']['startup_s'] / after['startup_s']:.2f}x")
    if "steps-cold" in figs and "steps-warm" in figs:
        cold, warm = figs["steps-cold"], figs["steps-warm"]
        print(f"  steps cold / warm (a job step per attempt / forked by the node's zygote step): launch -> first "
              f"step {cold['startup_s'] / warm['startup_s']:.2f}x, launch -> trial process "
              f"{cold['to_process_s'] / warm['to_process_s']:.2f}x; score warm / cold {warm['score'] / cold['score']:.2f}x")


def measure(title: str, arms: list[Arm], args: argparse.Namespace, backend: str, env: dict[str, str]) -> bool:
    """The arms in ABBA order (each twice, in both positions), `args.pairs` times."""
    for i in range(args.pairs):
        for arm in [*arms, *reversed(arms)]:
            print(f"  {backend} pair {i + 1}/{args.pairs}: {arm.name} ({args.duration})", flush=True)
            if not run_once(arm, args, backend, env):
                return False
    report(title, arms)
    return True


def big_state(mparams: float, repeats: int = 3) -> None:
    """The loop's wait for one checkpoint of a model of `mparams` million parameters (with SGD momentum:
    the imagenet seed, ResNet-50, has 25.6), synchronous against asynchronous, in this process."""
    import torch
    from aiperf_runner.train.ckptwriter import CheckpointWriter
    from aiperf_runner.train.trial import save_checkpoint

    n = int(mparams * 1e6)
    chunk = 1 << 20
    state = {"model": {f"w{i}": torch.randn(min(chunk, n - i)) for i in range(0, n, chunk)},
             "optimizer": {"state": {i: {"momentum_buffer": torch.randn(min(chunk, n - i))} for i in range(0, n, chunk)}}}
    print(f"\none checkpoint of {mparams:g} M parameters with momentum ({n * 8 / 1e6:.0f} MB), in this process")
    with tempfile.TemporaryDirectory(prefix="aiperf-ckpt-") as tmp:
        waits: dict[str, list[float]] = {"sync": [], "async": []}
        writes: dict[str, list[float]] = {}
        for mode in ["sync", "async", "async", "sync"] * repeats:
            ckw = CheckpointWriter(Path(tmp) / "checkpoint.pt", save_checkpoint, asynchronous=mode == "async")
            t0 = time.perf_counter()
            ckw.save(state, then=lambda: None)
            waits[mode].append(time.perf_counter() - t0)
            ckw.close()
            writes.setdefault(mode, []).extend(ckw.writes_s)
    sync, after = _median(waits["sync"]), _median(waits["async"])
    print(f"  the loop waits: sync {sync:.3f} s, async {after:.3f} s (the copy): {sync / after:.1f}x; "
          f"the write itself {_median(writes['sync']):.3f} s / {_median(writes['async']):.3f} s")


def slurm_env() -> dict[str, str] | None:
    env = dict(os.environ)
    if "SLURM_CONF" not in env and (REPO / "var" / "slurm" / "slurm.conf").exists():
        env["SLURM_CONF"] = str(REPO / "var" / "slurm" / "slurm.conf")
    try:
        subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30, check=True, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return env


def arms(cold: bool, slurm: bool) -> list[Arm]:
    extra = SLURM_OPTS if slurm else ()
    out = [Arm("sync", {"AIPERF_SYNC_CHECKPOINT": "1"}, extra), Arm("async", {"AIPERF_SYNC_CHECKPOINT": "0"}, extra)]
    if cold and not slurm:
        out.append(Arm("cold", {"AIPERF_SYNC_CHECKPOINT": "0"}, ("--backend-opt", "warm_start=false")))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="smoke", choices=["smoke", "fashion-mnist"])
    parser.add_argument("--duration", default="25s", help="of each run (default 25s)")
    parser.add_argument("--pairs", type=int, default=1, help="ABBA rounds, each arm runs twice in one (default 1)")
    parser.add_argument("--cold", action="store_true", help="add a local arm without the zygote")
    parser.add_argument("--slurm", action="store_true", help="also on the local SLURM cluster")
    parser.add_argument("--slurm-steps", action="store_true",
                        help="inside a SLURM allocation: a job step per attempt against warm starts")
    parser.add_argument("--no-local", action="store_true", help="only the SLURM part")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    parser.add_argument("--state-mparams", type=float, default=25.6,
                        help="also time one checkpoint of this many million parameters in-process (0: no)")
    args = parser.parse_args()
    if args.preset == "fashion-mnist" and not FASHION.is_dir():
        print(f"skipped: no Fashion-MNIST at {FASHION} (apt-get install dataset-fashion-mnist)")
        return 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "runner"), str(REPO),
                                                                      os.environ.get("PYTHONPATH")]))}
    ok = True
    if not args.no_local:
        print(f"local backend, {args.preset}, one slot ({os.cpu_count()} CPUs)", flush=True)
        ok = measure(f"local backend, {args.preset}", arms(args.cold, False), args, "local", env)
    if args.slurm or args.slurm_steps:
        senv = slurm_env()
        if senv is None:
            print("\nSLURM: skipped: no cluster answers sinfo (scripts/slurm-cluster.sh start; set SLURM_CONF)")
        else:
            senv["PYTHONPATH"] = env["PYTHONPATH"]
            if args.slurm:
                print(f"\nSLURM backend ({senv.get('SLURM_CONF')}), {args.preset}, one slot", flush=True)
                ok = measure(f"SLURM backend, {args.preset}", arms(False, True), args, "slurm", senv) and ok
            if args.slurm_steps:
                print(f"\nslurm-steps backend ({senv.get('SLURM_CONF')}), {args.preset}, one slot", flush=True)
                steps = [Arm("steps-cold", {"AIPERF_SYNC_CHECKPOINT": "0"}),
                         Arm("steps-warm", {"AIPERF_SYNC_CHECKPOINT": "0"}, ("--backend-opt", "warm_start=true"))]
                ok = measure(f"slurm-steps backend, {args.preset}", steps, args, "slurm-steps", senv) and ok
    if args.state_mparams > 0:
        big_state(args.state_mparams)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
