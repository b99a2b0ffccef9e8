"""Is the score a property of the machine? K runs of one configuration, and their spread.

    python bench/reproducibility.py                                    # smoke, 2 slots, 2m/5m/10m, 5 runs each
    python bench/reproducibility.py --duration 5m --runs 5             # the issue's figure
    python bench/reproducibility.py --preset fashion-mnist --duration 10m,30m
    python bench/reproducibility.py --backend sim --slots 8,512 --duration 10m
    python bench/reproducibility.py --slots 1,2 --duration 2m --runs 4 # one slot against two, alternated

Every run is a real `aiperf-runner run ... --offline` (a fresh process, as a site starts it), one
after the other in this invocation; its figures come from `spec/verify.py`, as the service computes
them. For each configuration (preset, backend, slots, duration) it prints mean, standard deviation
and coefficient of variation (std / mean) of the score and the regulated score, and the means of
epochs, trials, FLOPs per image trained (train FLOPs of the epochs counted over the images they
trained), images trained per second and slot utilisation; `--show-runs` lists every run. Several
slot counts in one invocation run interleaved (1, 2, 1, 2, ...), so that a change in the machine's
load hits all of them alike, and the ratio of each configuration's mean score to the first one's
is printed. Written: a plotly chart of the CV against run length (`--html`) and, with `--json`,
every run's figures.

The machine moves too: on a shared VM the same work runs 20-40 % faster or slower from one
quarter of an hour to the next. So before and after every run the machine's speed is probed
(bench/machine_speed.py: the preset's seed trained on a fixed batch on every core, `--probe-s`
seconds), and the table shows the probe's CV beside the score's and the CV of score / probe (the
spread left once the machine's own is taken out), with the share of CPU time the hypervisor stole.

`--seeds same` (default) runs the same command K times (seed 0): the spread of one site's repeated
runs. `--seeds different` gives run k the seed k: the spread across the search's random choices too.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "runner"))

from aiperf_runner.cli.options import parse_duration  # noqa: E402
from aiperf_runner.run.progress import fmt_duration, fmt_ops  # noqa: E402
from aiperf_runner.run.state import RunState  # noqa: E402
from aiperf_runner.spec.flops import flops_per_image  # noqa: E402
from aiperf_runner.spec.graph import load_graph  # noqa: E402
from aiperf_runner.spec.verify import verify  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
import machine_speed  # noqa: E402


@dataclass(frozen=True)
class Config:
    preset: str
    backend: str
    slots: int
    duration_s: float

    @property
    def label(self) -> str:
        return f"{self.preset} {self.backend} {self.slots} slot{'s' if self.slots != 1 else ''} {fmt_duration(self.duration_s)}"


def _cpu_jiffies() -> tuple[int, int]:
    """(all, stolen) CPU time of this machine so far, from /proc/stat ((0, 0) where there is none)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0


def run_once(config: Config, run_dir: Path, seed: int, extra: list[str], probe_s: float) -> dict[str, Any]:
    """One run as a site starts it, then its figures from the log; the machine's speed probed
    (bench/machine_speed.py) just before and just after it, unless `probe_s` is 0."""
    before = machine_speed.probe(config.preset, probe_s) if probe_s and config.backend != "sim" else None
    jiffies = _cpu_jiffies()
    cmd = [sys.executable, "-m", "aiperf_runner", "run", "--preset", config.preset, "--backend", config.backend,
           "--slots", str(config.slots), "--duration", f"{config.duration_s:g}s", "--seed", str(seed),
           "--offline", "--progress", "none", "--out", str(run_dir), *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "runner")})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    total, stolen = (b - a for a, b in zip(jiffies, _cpu_jiffies(), strict=True))
    out = figures(run_dir, wall)
    out["steal"] = stolen / total if total else None
    after = machine_speed.probe(config.preset, probe_s) if before is not None else None
    out["probe"] = (before + after) / 2 if before is not None and after is not None else None
    out["normalised"] = out["score"] / out["probe"] if out["probe"] else None
    return out


def figures(run_dir: Path, wall_s: float) -> dict[str, Any]:
    report = verify(run_dir)
    state = RunState.load(run_dir)
    flops: dict[str, int] = {}
    work = images = 0
    for ep in state.epoch_records():
        trial = str(ep["trial"])
        if trial not in flops:
            flops[trial] = flops_per_image(load_graph(str(run_dir / "trials" / trial / "graph.json"))).train
        n = int(ep.get("images_trained") or 0)
        work += flops[trial] * n
        images += n
    duration = float(report["duration_s"] or 0.0) or wall_s
    series = report["series"]
    half = _steady_score(series)
    return {"run_dir": str(run_dir), "score": report["score_ops"], "regulated": report["regulated_score_ops"],
            "max_accuracy": report["max_accuracy"], "epochs": report["epochs"],
            "trials": report["trials_finished"], "flops_per_image": work / images if images else None,
            "images_per_s": images / duration if duration else None, "steady_score": half,
            "utilisation": state.slot_utilisation(state.finished_at), "integrity_ok": report["integrity_ok"],
            "wall_s": wall_s}


def _steady_score(series: list[dict[str, Any]]) -> float | None:
    """Work done in the second half of the run over its length: the score a steady-state window gives."""
    if len(series) < 2:
        return None
    end = series[-1]
    mid = min(series, key=lambda p: abs(p["t"] - end["t"] / 2))
    span = end["t"] - mid["t"]
    return (end["work"] - mid["work"]) / span if span > 0 else None


def spread(values: Iterable[float | None]) -> tuple[float | None, float | None, float | None]:
    """(mean, sample standard deviation, coefficient of variation) of the values that exist."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return None, None, None
    mean = statistics.fmean(xs)
    std = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return mean, std, (std / mean if mean else None)


def summarise(config: Config, runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"config": config.__dict__, "label": config.label, "runs": runs}
    for key in ("score", "regulated", "steady_score", "epochs", "trials", "flops_per_image", "images_per_s",
                "utilisation", "max_accuracy", "probe", "normalised", "steal"):
        out[key] = dict(zip(("mean", "std", "cv"), spread(r[key] for r in runs), strict=True))
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def print_table(summaries: list[dict[str, Any]], show_runs: bool) -> None:
    print("\nconfiguration                       runs   score mean      CV   regulated     CV   steady CV"
          "  epochs  trials  FLOP/img   img/s  slot use  probe CV  score/probe CV  steal")
    for s in summaries:
        sc, rg, st = s["score"], s["regulated"], s["steady_score"]
        print(f"{s['label']:35} {len(s['runs']):>4} {fmt_ops(sc['mean']):>12} {_pct(sc['cv']):>7} "
              f"{fmt_ops(rg['mean']):>11} {_pct(rg['cv']):>6} {_pct(st['cv']):>10} "
              f"{_num(s['epochs']['mean']):>7} {_num(s['trials']['mean']):>7} "
              f"{_num(s['flops_per_image']['mean'], '{:.3g}'):>9} {_num(s['images_per_s']['mean'], '{:.0f}'):>7} "
              f"{_pct(s['utilisation']['mean']):>9} {_pct(s['probe']['cv']):>9} {_pct(s['normalised']['cv']):>15} "
              f"{_pct(s['steal']['mean']):>6}")
        if show_runs:
            for r in s["runs"]:
                probe = f"probe {fmt_ops(r['probe'])}" if r.get("probe") else ""
                print(f"    {fmt_ops(r['score']):>12} reg {fmt_ops(r['regulated']):>11} epochs {r['epochs']:>4} "
                      f"trials {r['trials']:>4} FLOP/img {_num(r['flops_per_image'], '{:.3g}')} "
                      f"img/s {_num(r['images_per_s'], '{:.0f}')} acc {_num(r['max_accuracy'], '{:.4f}')} {probe}  "
                      f"{r['run_dir']}")
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for s in summaries:
        c = s["config"]
        groups.setdefault((c["preset"], c["backend"], c["duration_s"]), []).append(s)
    for members in groups.values():
        if len(members) > 1 and members[0]["score"]["mean"]:
            base = members[0]
            for other in members[1:]:
                if other["score"]["mean"] is not None:
                    print(f"{other['label']} / {base['label']}: score x{other['score']['mean'] / base['score']['mean']:.3f}, "
                          f"images/s x{(other['images_per_s']['mean'] or 0) / (base['images_per_s']['mean'] or 1):.3f}")


def write_chart(summaries: list[dict[str, Any]], path: Path) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    series: dict[str, list[dict[str, Any]]] = {}
    for s in summaries:
        c = s["config"]
        series.setdefault(f"{c['preset']} {c['backend']} {c['slots']} slots", []).append(s)
    for name, points in series.items():
        points.sort(key=lambda s: s["config"]["duration_s"])
        minutes = [p["config"]["duration_s"] / 60 for p in points]
        fig.add_scatter(x=minutes, y=[(p["score"]["cv"] or 0) * 100 for p in points], mode="lines+markers",
                        name=f"{name}: score")
        fig.add_scatter(x=minutes, y=[(p["regulated"]["cv"] or 0) * 100 for p in points], mode="lines+markers",
                        name=f"{name}: regulated score", line={"dash": "dot"})
    fig.update_layout(title="Run-to-run spread: coefficient of variation against run length",
                      xaxis_title="run length (minutes)", yaxis_title="CV (%)", height=600)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="smoke")
    ap.add_argument("--backend", default="local")
    ap.add_argument("--slots", default="2", help="comma-separated slot counts, run interleaved (default 2)")
    ap.add_argument("--duration", action="append", default=None,
                    help="run length(s), comma-separated or repeated (default: 2m,5m,10m)")
    ap.add_argument("--runs", type=int, default=5, help="runs per configuration (default 5)")
    ap.add_argument("--seeds", choices=("same", "different"), default="same")
    ap.add_argument("--run-arg", action="append", default=[], metavar="ARG",
                    help="an argument added to every `aiperf-runner run` (repeatable), e.g. --run-arg=--data=DIR")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the run directories (default: removed after each run)")
    ap.add_argument("--show-runs", action="store_true", help="print every run's figures")
    ap.add_argument("--probe-s", type=float, default=4.0,
                    help="seconds of the machine's speed probe before and after each run (0: none; never for sim)")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    ap.add_argument("--html", type=Path, default=None, help="chart file (default: OUT/reproducibility.html)")
    args = ap.parse_args()
    durations = [parse_duration(d) for spec in (args.duration or ["2m,5m,10m"]) for d in spec.split(",") if d.strip()]
    slot_counts = [int(s) for s in args.slots.split(",") if s.strip()]
    if args.runs < 2:
        ap.error("--runs must be at least 2 (a spread needs two runs)")
    out = args.out or Path(tempfile.mkdtemp(prefix="aiperf-repro-"))
    html = args.html or out / "reproducibility.html"
    configs = [Config(args.preset, args.backend, n, d) for d in durations for n in slot_counts]
    total = sum(c.duration_s for c in configs) * args.runs
    print(f"{len(configs)} configuration(s) x {args.runs} runs, {fmt_duration(total)} of runs; in {out}", flush=True)

    runs: dict[Config, list[dict[str, Any]]] = {c: [] for c in configs}
    for duration in durations:
        for k in range(args.runs):
            for config in (c for c in configs if c.duration_s == duration):  # interleaved slot counts
                run_dir = out / f"{config.preset}-{config.backend}-{config.slots}s-{int(duration)}s-{k}"
                seed = 0 if args.seeds == "same" else k
                r = run_once(config, run_dir, seed, args.run_arg, args.probe_s)
                runs[config].append(r)
                print(f"  {config.label} run {k + 1}/{args.runs}: score {fmt_ops(r['score'])}, regulated "
                      f"{fmt_ops(r['regulated'])}, {r['epochs']} epochs, {r['trials']} trials, FLOP/img "
                      f"{_num(r['flops_per_image'], '{:.3g}')}, acc {_num(r['max_accuracy'], '{:.4f}')}, "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
                if not args.keep and args.out is None:
                    import shutil

                    shutil.rmtree(run_dir, ignore_errors=True)
    summaries = [summarise(c, runs[c]) for c in configs]
    print_table(summaries, args.show_runs)
    write_chart(summaries, html)
    print(f"chart: {html}")
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
