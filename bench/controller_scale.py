"""The real controller, search and event log at 8, 64, 512 and 4,096 slots, on the `sim` backend.

Each scale is one run of `Controller` (the architecture search, the hyper-parameter search, the
hash-chained log, the live score: all real) whose trials are simulated by the `sim` backend
(runner/aiperf_runner/backends/sim.py: epochs take FLOPs / slot speed, with noise, failures and
stragglers; simulated time is wall time). Each scale runs in its own process under a timeout.
Printed per scale:

  util        slot utilisation from the log (RunState.slot_utilisation)
  ctl/trial   CPU seconds of the controller's own thread per ended attempt (the search's threads
              and process -- the architecture search, in a process of its own from 64 slots, and
              TPE asked ahead -- and the simulator's thread are shown apart: they are not the
              controller's loop)
  search s    CPU seconds of the searches (the proposal buffer's and TPE's threads, the search's process)
  sim s       CPU seconds of the simulator's thread (the simulated hardware, not the controller)
  demand/s    proposals the slots ask for: slots / mean attempt length
  deliv/s     proposals the search made per second
  log KiB/s   bytes of the main events.jsonl per second of run
  score/slot  the run's score (spec/scoring.py) per slot, relative to the 8-slot figure (or to the
              smallest scale run): the ideal linear line is 1.000
  pro rata    the same, with the epochs the run's end cut short counted for the part they ran
              (at the trial's own rate): what the slots did, whatever the length of the epochs
              they were in when the clock stopped
  cut         share of slot time inside epochs the end cut short (the score counts none of it)
  x seed      train FLOPs per image of the trials running at the end, over the seed's
  prep s      seconds from the controller's start to the run's (the first wave -- candidates,
              hyper-parameters, trial directories -- is made before the clock starts)

and under each row, the hyper-parameters' sources (seed / inherited / tpe), TPE's asks (made ahead
on the "tpe-proposer" thread: mean seconds per ask, CPU of that thread), the trials of a TPE round
that inherited because no TPE point was ready, and the score per slot over the sim's slot speed
(the absolute ideal line), plain and pro rata.

Why two score columns: the search grows architectures (every morphism adds FLOPs, and the sim's
accuracy rises with them), and the more slots, the more results per generation to pick the best
from, so the larger the networks it reaches in ten minutes (60-s trials: 2.9x the seed's FLOPs at
8 slots, 5-8x at 64 to 4,096). Longer epochs lose more to the end of the run, where each slot's
epoch in progress counts for nothing: that is the score's rule and the search's trajectory, not
the controller's scaling, and it shrinks as runs grow longer. `pro rata` takes it out; `cut` and
`x seed` show it. Measured on this 2-core machine (shared; load average printed), 60-s trials
over 600 s:

    slots    util  ctl/trial  search s  demand/s  deliv/s  log KiB/s  score/slot  pro rata    cut  x seed  prep s
        8 100.00%   31.14 ms       0.7       0.1      0.1        0.1       1.000     1.000   7.7%     2.6     0.4
       64 100.00%    7.07 ms       5.0       0.5      0.5        0.8       1.002     1.007   8.4%     2.9     0.8
      512  99.99%    2.75 ms      23.8       3.8      4.1        5.9       1.008     0.999   7.1%     2.8     2.7
     4096  99.95%    1.76 ms     173.1      27.7     30.4       43.8       1.003     1.001   7.7%     2.9    19.1

(3 December, load average 0-0.7, smoke's FLOPs bounded at 3x the seed's; the sim column left
out). With the bound at 2x (now; `--slots 8,4096`, the same day): utilisation 100.00 % / 99.18 %,
score per slot 1.000 / 0.992, 39.1 proposals a second delivered against 36.9 asked for at 4,096
slots, 301.5 s of search CPU, x seed 1.8 / 1.9. Against the sim's slot speed (the
absolute ideal line) the score per slot is 0.904 / 0.907 / 0.912 / 0.907, pro rata 0.982 / 0.989 /
0.980 / 0.982. At 4,096 slots the 4,096 trials of the TPE rounds all got a TPE point (4,352 asks,
11.3 ms each), none inherited for want of one. Before the search kept delivering at its bounds
(searchers/bayesian.py: only new children within the bounds, architectures whose children are all
refused not expanded again, short batches filled with random chains), the 4,096-slot run shrank to
one proposal a batch once its best architectures reached the FLOPs bound: 18.2 proposals a second
delivered against 28.2 asked for, slot utilisation 65.7 %, score per slot 0.70 of the sim's speed.
Earlier still, with unbounded architectures, the search grew networks of 5-8x the seed's FLOPs at
64-4,096 slots against 3x at 8, and the score per slot fell to 0.88 of the 8-slot figure at 4,096
(their longer epochs lost more to the end of the run; pro rata 1.007).

    python bench/controller_scale.py                                  # 8,64,512,4096 slots, 20-s trials, 60 s each
    python bench/controller_scale.py --slots 8,4096 --trial-s 60 --duration 600   # the issue's scenario
    python bench/controller_scale.py --failure-rate 0.02 --straggler-rate 0.02 --json out.json

The trial length is that of the preset's seed architecture (`--epochs` epochs of `--trial-s / --epochs`
seconds each, at the sim's speed); children of the search take longer in proportion to their FLOPs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aiperf_runner.data.presets import get_preset
from aiperf_runner.run.controller import Controller
from aiperf_runner.run.state import RunState
from aiperf_runner.rundir.config import RunConfig
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.runio import RunDir
from aiperf_runner.spec.scoring import score_run
from aiperf_runner.spec.seeds import seed_for_preset

TICK_S = os.sysconf("SC_CLK_TCK")


def seed_flops_per_s(preset: str, trial_s: float, epochs: int) -> float:
    """The per-device speed at which the preset's seed architecture trains `epochs` in `trial_s`."""
    p = get_preset(preset)
    data = p.dataset(None)
    counts = flops_per_image(seed_for_preset(preset, data["classes"], data["image_size"]))
    work = counts.train * data["train_images"] + counts.eval * data["val_images"]
    return work * epochs / trial_s


class ThreadClock:
    """Samples the CPU time of this process's threads by name (a thread's time is read while it lives)."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.cpu: dict[str, float] = {}
        self._start: dict[str, float] = {}
        self._armed = False
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._loop, name="thread-clock", daemon=True)

    def sample(self) -> None:
        for t in threading.enumerate():
            try:
                fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            used = (int(fields[11]) + int(fields[12])) / TICK_S  # utime + stime
            # Time a thread spent before the run (the imports) is not the run's; later threads start at 0.
            self._start.setdefault(t.name, 0.0 if self._armed else used)
            self.cpu[t.name] = used - self._start[t.name]

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            self.sample()

    def __enter__(self) -> ThreadClock:
        self.sample()
        self._armed = True
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.sample()


def run_one(args: argparse.Namespace) -> dict[str, Any]:
    """One scale, in this process: the controller's run and what only this process can see."""
    options = {"flops_per_s": seed_flops_per_s(args.preset, args.trial_s, args.epochs), "noise": args.noise,
               "failure_rate": args.failure_rate, "straggler_rate": args.straggler_rate, "seed": args.seed,
               "slot_spread": args.slot_spread}
    config = RunConfig(preset=args.preset, slots=args.one, duration_s=args.duration, backend="sim",
                       backend_options=options, epoch_budgets=[args.epochs] * 4, seed=args.seed)
    cpu0, wall0 = time.process_time(), time.time()
    with ThreadClock() as clock:
        controller = Controller.create(config, args.run_dir)
        buffer = controller.buffer
        controller.run()
    tpe = getattr(controller.hparams, "tpe", None)
    return {"threads_cpu_s": clock.cpu, "process_cpu_s": time.process_time() - cpu0, "wall_s": time.time() - wall0,
            "flops_per_s": options["flops_per_s"],
            "proposals": buffer.proposals, "propose_s": buffer.propose_seconds, "created_at": wall0,
            "hparam_fallbacks": getattr(controller.hparams, "fallbacks", 0),
            "search_process_cpu_s": buffer.search_process_cpu_s,
            "tpe_asks": getattr(tpe, "asks", 0), "tpe_ask_s": getattr(tpe, "ask_seconds", 0.0)}


def cut_at_end(state: RunState, run: RunDir, rules: str, flops_per_s: float) -> tuple[float, float, float]:
    """What the run's end cut short: (slot seconds inside epochs the cancellation ended, the work
    those seconds did pro rata, the mean train FLOPs per image of the trials cancelled). The rate
    is the trial's own (work per second of its logged epochs), else the slot's nominal speed
    (a straggler's first epoch: overcounted)."""
    seconds = work = flops = 0.0
    cancelled = 0
    for tr in state.trials.values():
        for att in tr.attempts:
            if att.outcome != "cancelled" or att.ended is None:
                continue
            mine = [e for e in tr.epochs.values() if e.get("attempt") == att.attempt]
            cut = att.ended - max([float(e["ended_at"]) for e in mine], default=att.started)
            counts = run.trial_flops(tr.trial, rules)
            logged = list(tr.epochs.values())
            epoch_work = (counts.train * (logged[0]["images_trained"] if logged else 0)
                          + counts.eval * (logged[0]["images_evaluated"] if logged else 0))
            rate = (epoch_work / (sum(float(e["seconds"]) for e in logged) / len(logged))
                    if logged else flops_per_s * att.devices)
            seconds += max(cut, 0.0)
            work += max(cut, 0.0) * rate
            flops += counts.train
            cancelled += 1
    return seconds, work, flops / max(cancelled, 1)


def measure(run_dir: Path, inside: dict[str, Any], slots: int) -> dict[str, Any]:
    state = RunState.load(run_dir)
    assert state.started_at is not None
    end = state.finished_at or state.last_t or state.started_at
    span = max(end - state.started_at, 1e-9)
    attempts = [a for tr in state.trials.values() for a in tr.attempts]
    ended = [a for a in attempts if a.ended is not None and a.outcome != "cancelled"]
    mean_len = sum(a.ended - a.started for a in ended) / len(ended) if ended else float("nan")
    threads = inside["threads_cpu_s"]
    series = score_run(run_dir)
    run = RunDir(run_dir)
    cut_s, cut_work, end_flops = cut_at_end(state, run, series.rules, inside["flops_per_s"])
    seed = state.trials.get("t0000")
    seed_flops = run.trial_flops(seed.trial, series.rules).train if seed is not None else float("nan")
    return {
        "slots": slots, "span_s": span, "utilisation": state.slot_utilisation() or 0.0,
        "attempts_ended": len(ended), "trials_proposed": len(state.trials),
        "controller_cpu_s": threads.get("MainThread", 0.0),
        "search_cpu_s": (threads.get("proposal-buffer", 0.0) + threads.get("tpe-proposer", 0.0)
                         + inside.get("search_process_cpu_s", 0.0)),
        "tpe_cpu_s": threads.get("tpe-proposer", 0.0), "tpe_asks": inside.get("tpe_asks", 0),
        "tpe_ask_s_mean": inside.get("tpe_ask_s", 0.0) / max(inside.get("tpe_asks", 0), 1),
        "hparam_fallbacks": inside.get("hparam_fallbacks", 0),
        "hparam_sources": dict(Counter(tr.hparam_source for tr in state.trials.values())),
        "sim_cpu_s": threads.get("sim-backend", 0.0), "process_cpu_s": inside["process_cpu_s"],
        "ctl_s_per_trial": threads.get("MainThread", 0.0) / max(len(ended), 1),
        "demand_per_s": slots / mean_len if ended else float("nan"),
        "delivered_per_s": inside["proposals"] / span, "propose_s_mean": inside["propose_s"] / max(inside["proposals"], 1),
        "log_bytes_per_s": (run_dir / "events.jsonl").stat().st_size / span,
        "score": series.score, "score_per_slot": series.score / slots,
        "cut_share": cut_s / (slots * span), "score_per_slot_pro_rata": (series.work + cut_work) / span / slots,
        "end_flops_x_seed": end_flops / seed_flops,
        "efficiency": series.score / slots / inside["flops_per_s"],
        "efficiency_pro_rata": (series.work + cut_work) / span / slots / inside["flops_per_s"],
        "first_wave_s": state.started_at - inside["created_at"],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slots", default="8,64,512,4096", help="comma-separated scales (default 8,64,512,4096)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of run per scale (default 60)")
    p.add_argument("--trial-s", type=float, default=20.0, help="seconds of the seed architecture's trial (default 20)")
    p.add_argument("--epochs", type=int, default=2, help="epochs per trial, every round (default 2)")
    p.add_argument("--preset", default="smoke", help="smoke (default) or fashion-mnist: presets needing no --data")
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--failure-rate", type=float, default=0.01)
    p.add_argument("--straggler-rate", type=float, default=0.01)
    p.add_argument("--slot-spread", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=240.0, help="seconds allowed beyond --duration per scale")
    p.add_argument("--json", type=Path, help="write the table here as well")
    p.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: run one scale in this process
    p.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--inside", type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def child_argv(args: argparse.Namespace, slots: int, run_dir: Path, inside: Path) -> list[str]:
    return [sys.executable, __file__, "--one", str(slots), "--run-dir", str(run_dir), "--inside", str(inside),
            "--duration", str(args.duration), "--trial-s", str(args.trial_s), "--epochs", str(args.epochs),
            "--preset", args.preset, "--noise", str(args.noise), "--failure-rate", str(args.failure_rate),
            "--straggler-rate", str(args.straggler_rate), "--slot-spread", str(args.slot_spread),
            "--seed", str(args.seed)]


def print_row(row: dict[str, Any], base: dict[str, Any]) -> None:
    print(f"{row['slots']:>6} {row['utilisation']:>7.2%} {row['ctl_s_per_trial'] * 1000:>9.2f} ms "
          f"{row['search_cpu_s']:>8.1f} {row['sim_cpu_s']:>7.1f} {row['demand_per_s']:>9.1f} {row['delivered_per_s']:>8.1f} "
          f"{row['log_bytes_per_s'] / 1024:>9.1f} {row['score_per_slot_rel']:>10.3f} {row['pro_rata_rel']:>8.3f} "
          f"{row['cut_share']:>6.1%} {row['end_flops_x_seed']:>6.1f} {row['first_wave_s']:>7.1f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one is not None:
        assert args.run_dir is not None and args.inside is not None
        args.inside.write_text(json.dumps(run_one(args)))
        return 0
    scales = [int(s) for s in args.slots.split(",")]
    work = Path(tempfile.mkdtemp(prefix="aiperf-bench-scale-"))
    print(f"controller at scale on the sim backend: {args.preset}, {args.epochs}-epoch trials of {args.trial_s:g} s "
          f"(seed architecture), {args.duration:g} s per scale, failures {args.failure_rate:g}, stragglers "
          f"{args.straggler_rate:g}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    print(f"{'slots':>6} {'util':>7} {'ctl/trial':>12} {'search s':>8} {'sim s':>7} {'demand/s':>9} {'deliv/s':>8} "
          f"{'log KiB/s':>9} {'score/slot':>10} {'pro rata':>8} {'cut':>6} {'x seed':>6} {'prep s':>7}")
    rows: list[dict[str, Any]] = []
    base: dict[str, Any] | None = None
    for slots in scales:
        run_dir, inside = work / f"s{slots}", work / f"s{slots}.json"
        try:
            done = subprocess.run(child_argv(args, slots, run_dir, inside), timeout=args.duration + args.timeout)
        except subprocess.TimeoutExpired:
            print(f"{slots:>6} TIMED OUT after {args.duration + args.timeout:g} s", flush=True)
            continue
        if done.returncode != 0 or not inside.exists():
            print(f"{slots:>6} FAILED (exit status {done.returncode})", flush=True)
            continue
        row = measure(run_dir, json.loads(inside.read_text()), slots)
        base = base or row
        row["score_per_slot_rel"] = row["score_per_slot"] / base["score_per_slot"]
        row["pro_rata_rel"] = row["score_per_slot_pro_rata"] / base["score_per_slot_pro_rata"]
        rows.append(row)
        print_row(row, base)
        print(f"{'':>6} hyper-parameters: {row['hparam_sources']}; TPE asks {row['tpe_asks']} "
              f"(mean {row['tpe_ask_s_mean'] * 1000:.1f} ms, {row['tpe_cpu_s']:.1f} s CPU on its thread), "
              f"inherited for want of a ready point {row['hparam_fallbacks']}", flush=True)
        print(f"{'':>6} score per slot / the sim's slot speed: {row['efficiency']:.3f}, pro rata "
              f"{row['efficiency_pro_rata']:.3f}; load average {os.getloadavg()[0]:.1f}", flush=True)
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.keep:
        print(f"run directories kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if len(rows) == len(scales) else 1


if __name__ == "__main__":
    sys.exit(main())
