"""Does the architecture search do real work? Three searches on one preset, the same wall time each.

    python bench/search_quality.py                        # fashion-mnist, 3 x 30 minutes, 2 slots (1 h 30 in all)
    python bench/search_quality.py --duration 10m         # shorter
    python bench/search_quality.py --arms automl,seed --duration 4m --out runs/sq
    python bench/search_quality.py --workload llm         # AIPerf-LLM on llm-kjv, 3 x 5 minutes, 2 slots
    python bench/search_quality.py --workload llm --preset llm-smoke --duration 1m   # a quick check (~4 min)

Arms, one after the other in this invocation, each a real run on this machine (the real trial program):

  --workload image (default; `aiperf-runner run --preset fashion-mnist`, local backend):
  automl   the search as built: network morphisms chosen by the GP (edit-distance kernel, UCB,
           simulated annealing), TPE hyper-parameters (controller.make_search)
  random   random morphism chains from a random trained architecture, the same TPE policy
           (search/baselines.py RandomMorphismSearch)
  seed     the seed architecture for every trial, TPE hyper-parameters from the first trial on
           (search/baselines.py SeedOnlySearch)

  --workload llm (`aiperf-runner run --workload llm --preset llm-kjv`, run/llmrun.py):
  automl   the search as built: 1-2 function-preserving growths chosen by GP-UCB + annealing over
           the blocks' shapes (search/llmsearch.py), TPE hyper-parameters (search/llmhparams.py)
  random   1-2 random growths of a random finished trial, the same TPE policy
           (search/llmbaselines.py LlmRandomGrowthSearch)
  seed     the seed transformer for every trial, trained from scratch, TPE from the first trial on
           (search/llmbaselines.py LlmSeedOnlySearch)

Printed: for each arm, its trials, then trials finished, distinct architectures, morphisms (growths)
used, the best validation accuracy (for llm: the lowest validation loss, nats) at quarters of the run
and at its end, the final score and regulated score (spec/verify.py, as the service computes them),
slot utilisation; then automl's best result and regulated score against each baseline. Images: the
error-rate ratio, the baseline's 1 - accuracy over automl's. LLM: the loss difference in nats (baseline
minus automl) and the loss ratio baseline / automl. Every ratio > 1 (difference > 0) means automl ahead.
Written: a plotly HTML chart (best accuracy or loss and regulated score over time, the arms overlaid).
Exit status 1 when automl ends behind a baseline that ran.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "runner"))

from aiperf_runner.cli.options import parse_duration  # noqa: E402
from aiperf_runner.run.controller import Controller, RunConfig, make_search  # noqa: E402
from aiperf_runner.run.llmrun import LlmRun, LlmRunConfig  # noqa: E402
from aiperf_runner.run.progress import fmt_duration, fmt_ops  # noqa: E402
from aiperf_runner.run.state import RunState  # noqa: E402
from aiperf_runner.search.baselines import random_search_factory, seed_only_factory  # noqa: E402
from aiperf_runner.search.llmbaselines import llm_random_factory, llm_seed_only_factory  # noqa: E402
from aiperf_runner.spec.errors import AiperfError  # noqa: E402
from aiperf_runner.spec.eventlog import read_events  # noqa: E402
from aiperf_runner.spec.flops import flops_per_image  # noqa: E402
from aiperf_runner.spec.graph import load_graph  # noqa: E402
from aiperf_runner.spec.llmflops import LlmArch, train_flops_per_token  # noqa: E402
from aiperf_runner.spec.llmrules import llm_preset, regulated_score_ops, score_ops  # noqa: E402
from aiperf_runner.spec.verify import verify  # noqa: E402

ARMS = {
    "automl": ("AutoML: morphisms + GP + TPE", make_search),
    "random": ("random morphisms + TPE", random_search_factory),
    "seed": ("seed architecture + TPE", seed_only_factory),
}
LLM_ARMS = {
    "automl": ("AutoML: growths + GP + TPE", None),  # None: LlmRun's own searches
    "random": ("random growths + TPE", llm_random_factory),
    "seed": ("seed architecture + TPE", llm_seed_only_factory),
}
QUARTERS = (0.25, 0.5, 0.75, 1.0)
Series = list[tuple[float, float | None, float]]  # (seconds since the start, best so far, regulated score)


def _run_stoppable(run: Callable[[], str], on_signal: Callable[[int, Any], Any]) -> str:
    """`run()` with SIGINT and SIGTERM handled by `on_signal` (a stop ends this arm, the next one runs)."""
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def best_at(series: Series, t: float, lower_better: bool) -> float | None:
    """The best result reached by time `t` (None before the first)."""
    seen = [v for when, v, _reg in series if when <= t + 1e-6 and v is not None]
    return (min(seen) if lower_better else max(seen)) if seen else None


# ---- images -----------------------------------------------------------------------------------------

def run_image_arm(arm: str, run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One arm's run, then its figures from the log (verify: the service's computation)."""
    config = RunConfig(preset=args.preset, slots=args.slots, duration_s=args.duration_s, backend="local",
                       data=args.data, seed=args.seed, system_name=f"search-quality {arm}")
    controller = Controller.create(config, run_dir, search_factory=ARMS[arm][1])
    reason = _run_stoppable(controller.run, lambda signum, frame: controller.request_stop("stopped"))
    report = verify(run_dir)
    state = RunState.load(run_dir)
    # Before the first epoch there is no accuracy yet (the series says 0): None, not a point at 0.
    series: Series = [(p["t"], p["max_accuracy"] or None, p["regulated"]) for p in report["series"]]
    return {"arm": arm, "label": ARMS[arm][0], "reason": reason, "run_dir": run_dir, "series": series,
            "rows": trial_rows(run_dir, state), "best": [best_at(series, q * args.duration_s, False) for q in QUARTERS],
            "final": report["max_accuracy"], "score": report["score_ops"],
            "regulated": report["regulated_score_ops"], "integrity_ok": report["integrity_ok"],
            "valid": report["valid"], "trials": state.count("finished"),
            "architectures": len({t.arch_hash for t in state.trials.values()}),
            "changes": state.morphism_counts(), "utilisation": state.slot_utilisation(state.finished_at)}


def trial_rows(run_dir: Path, state: RunState) -> list[str]:
    """One line per trial, to see why an arm did what it did: round, epochs done of the budget, cost
    per image against the first trial's (the seed's), best accuracy, where the hyper-parameters
    came from, the morphisms that made the architecture."""
    rows, seed_flops = [], None
    for tr in sorted(state.trials.values(), key=lambda t: t.seq):
        flops = flops_per_image(load_graph(str(run_dir / "trials" / tr.trial / "graph.json"))).train
        seed_flops = seed_flops or flops
        hp = tr.hparams
        rows.append(f"{tr.trial} r{tr.round} {len(tr.epochs):>2}/{tr.epoch_budget:<2} epochs  cost x{flops / seed_flops:4.2f}  "
                    f"best {_fmt(tr.epoch_best)}  {tr.status:9} {tr.hparam_source:9} bs {hp.get('batch_size')} "
                    f"lr {float(hp.get('lr', 0)):.3f}  {'+'.join(tr.morphisms) or '-'}")
    return rows


# ---- AIPerf-LLM -------------------------------------------------------------------------------------

def run_llm_arm(arm: str, run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One arm's LLM run, then its figures from the log and verify (the service's computation)."""
    config = LlmRunConfig(preset=args.preset, slots=args.slots, duration_s=args.duration_s, seed=args.seed)
    llm = LlmRun.create(config, run_dir, say=lambda line: None, search_factory=LLM_ARMS[arm][1])
    # LlmRun.run ends on KeyboardInterrupt: SIGTERM made one, as `aiperf-runner run --workload llm` does.
    reason = _run_stoppable(llm.run, signal.default_int_handler)
    return llm_result(arm, run_dir, reason, args)


def llm_result(arm: str, run_dir: Path, reason: str, args: argparse.Namespace) -> dict[str, Any]:
    """An LLM arm's figures from its finished run directory."""
    report = verify(run_dir)
    events = read_events(run_dir / "events.jsonl")
    series = llm_series(events, report)
    proposed = [e for e in events if e["type"] == "trial_proposed"]
    return {"arm": arm, "label": LLM_ARMS[arm][0], "reason": reason, "run_dir": run_dir, "series": series,
            "rows": llm_rows(events), "best": [best_at(series, q * args.duration_s, True) for q in QUARTERS],
            "final": report["best_loss"], "score": report["score_ops"],
            "regulated": report["regulated_score_ops"], "integrity_ok": report["integrity_ok"],
            "valid": report["valid"], "trials": report["trials_finished"],
            "architectures": len({e["arch_hash"] for e in proposed}),
            "changes": dict(Counter(g["kind"] for e in proposed for g in e["growths"])),
            "utilisation": llm_utilisation(events, args.slots)}


def llm_series(events: list[dict[str, Any]], report: dict[str, Any]) -> Series:
    """Best loss and regulated score after each finished trial (score: the FLOPs of the finished trials'
    training over the time so far, as at the end), then the verified figures at the run's end."""
    t0 = events[0]["t"]
    flops_of = {(e["trial"], e["attempt"]): e["flops"] for e in events if e["type"] == "train_end"}
    series: Series = []
    best: float | None = None
    flops = 0
    for e in events:
        if e["type"] != "trial_finished" or not math.isfinite(e["val_loss"]):
            continue
        flops += flops_of.get((e["trial"], e["attempt"]), 0)
        best = e["val_loss"] if best is None else min(best, e["val_loss"])
        t = e["t"] - t0
        series.append((t, best, regulated_score_ops(score_ops(flops, t), best)))
    series.append((report["duration_s"], report["best_loss"], report["regulated_score_ops"]))
    return series


def llm_utilisation(events: list[dict[str, Any]], slots: int) -> float | None:
    """Slot time spent in attempts (started to finished, failed or cancelled) over slots x the run's time."""
    started: dict[tuple[str, int], float] = {}
    busy = 0.0
    for e in events:
        key = (e.get("trial", ""), e.get("attempt", 0))
        if e["type"] == "trial_started":
            started[key] = e["t"]
        elif e["type"] in ("trial_finished", "trial_failed", "trial_cancelled") and key in started:
            busy += e["t"] - started.pop(key)
    total = slots * (events[-1]["t"] - events[0]["t"])
    return busy / total if total > 0 else None


def llm_rows(events: list[dict[str, Any]]) -> list[str]:
    """One line per trial: round, outcome, blocks, training FLOPs per token against the seed's, validation
    loss, where the hyper-parameters came from, the growths that made the architecture."""
    status: dict[str, str] = {}
    loss: dict[str, float] = {}
    for e in events:
        if e["type"] in ("trial_started", "trial_finished", "trial_failed", "trial_cancelled"):
            status[e["trial"]] = e["type"].removeprefix("trial_")
        if e["type"] == "trial_finished":
            loss[e["trial"]] = e["val_loss"]
    rows, seed_flops = [], None
    for e in (e for e in events if e["type"] == "trial_proposed"):
        arch = LlmArch.from_dict(e["arch"])
        flops = train_flops_per_token(arch).train
        seed_flops = seed_flops or flops
        hp, growths = e["hparams"], "+".join(g["kind"] for g in e["growths"]) or "-"
        rows.append(f"{e['trial']} r{e['round']} {status.get(e['trial'], 'waiting'):9} {len(arch.layers)} blocks  "
                    f"cost x{flops / seed_flops:4.2f}  loss {_fmt(loss.get(e['trial']))}  {e['hparam_source']:9} "
                    f"bt {hp['batch_tokens']:>4} lr {hp['lr']:.4f} wu {hp['warmup_steps']:>3} "
                    f"wd {hp['weight_decay']:.3f}  {growths}")
    return rows


# ---- the report -------------------------------------------------------------------------------------

def _accuracy_margin(automl: float, base: float) -> str:
    return f"{(automl - base) * 100:+.2f} points; error-rate ratio {(1 - base) / max(1 - automl, 1e-9):.3f}"


def _loss_margin(automl: float, base: float) -> str:
    return f"baseline - automl {base - automl:+.4f} nats; loss ratio baseline/automl {base / automl:.3f}"


@dataclass(frozen=True)
class Workload:
    """What differs between the image and LLM benches."""

    preset: str                 # the default preset
    duration: str               # the default wall time of each arm
    arms: dict[str, tuple[str, Any]]
    run_arm: Callable[[str, Path, argparse.Namespace], dict[str, Any]]
    metric: str                 # the result the quarters show
    lower_better: bool
    changes: str                # what makes a child from its parent
    margin: Callable[[float, float], str]  # automl's best against a baseline's, in words


WORKLOADS = {
    "image": Workload("fashion-mnist", "30m", ARMS, run_image_arm, "validation accuracy", False, "morphisms",
                      _accuracy_margin),
    "llm": Workload("llm-kjv", "5m", LLM_ARMS, run_llm_arm, "validation loss (nats)", True, "growths",
                    _loss_margin),
}


def _fmt(value: float | None) -> str:
    return "   -  " if value is None else f"{value:.4f}"


def print_table(results: list[dict[str, Any]], duration_s: float, wl: Workload) -> None:
    marks = "  ".join(f"@{fmt_duration(q * duration_s)}".rjust(9) for q in QUARTERS)
    print(f"\nbest {wl.metric} at quarters of the run (@ elapsed time), final score and regulated score")
    print(f"{'arm':8} {'trials':>6} {'archs':>5}  {marks}  {'score':>12} {'regulated':>12} {'slot use':>8}  "
          f"{wl.changes}")
    for r in results:
        best = "  ".join(_fmt(b).rjust(9) for b in r["best"])
        util = "-" if r["utilisation"] is None else f"{r['utilisation']:.1%}"
        changes = ", ".join(f"{k} {v}" for k, v in sorted(r["changes"].items())) or "-"
        print(f"{r['arm']:8} {r['trials']:>6} {r['architectures']:>5}  {best}  {fmt_ops(r['score']):>12} "
              f"{fmt_ops(r['regulated']):>12} {util:>8}  {changes}")


def _baselines(results: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """automl's result and those of the baselines that reached a result."""
    by_arm = {r["arm"]: r for r in results}
    return by_arm.get("automl"), [by_arm[n] for n in ("random", "seed") if n in by_arm and by_arm[n]["final"] is not None]


def _reg_ratio(automl: dict[str, Any], base: dict[str, Any]) -> float:
    return automl["regulated"] / base["regulated"] if base["regulated"] else float("inf")


def compare(results: list[dict[str, Any]], wl: Workload) -> bool:
    """Print automl against each baseline; False when automl ends behind one (or reached no result where
    a baseline did)."""
    automl, bases = _baselines(results)
    if automl is None:
        return True
    ahead = True
    for base in bases:
        if automl["final"] is None:
            print(f"automl vs {base['arm']:6}: automl reached no result, {base['arm']} {base['final']:.4f} (BEHIND)")
            ahead = False
            continue
        gain = automl["final"] - base["final"]
        gain = -gain if wl.lower_better else gain
        verdict = "ahead" if gain > 0 else ("level" if gain == 0 else "BEHIND")
        print(f"automl vs {base['arm']:6}: best {wl.metric} {automl['final']:.4f} vs {base['final']:.4f} "
              f"({verdict}: {wl.margin(automl['final'], base['final'])}); "
              f"regulated-score ratio {_reg_ratio(automl, base):.3f}")
        ahead = ahead and gain >= 0
    return ahead


def write_chart(results: list[dict[str, Any]], path: Path, title: str, wl: Workload) -> None:
    from plotly.subplots import make_subplots

    metric = wl.metric.split(" (")[0]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=(f"Best {metric}", "Regulated score (OPS)"))
    colours = {"automl": "#1f77b4", "random": "#ff7f0e", "seed": "#2ca02c"}
    for r in results:
        minutes = [t / 60 for t, _a, _g in r["series"]]
        fig.add_scatter(x=minutes, y=[a for _t, a, _g in r["series"]], name=r["label"], mode="lines", line_shape="hv",
                        line={"color": colours[r["arm"]]}, legendgroup=r["arm"], row=1, col=1)
        fig.add_scatter(x=minutes, y=[g for _t, _a, g in r["series"]], name=r["label"], mode="lines",
                        line={"color": colours[r["arm"]]}, legendgroup=r["arm"], showlegend=False, row=2, col=1)
    fig.update_xaxes(title_text="minutes since run start", row=2, col=1)
    fig.update_yaxes(title_text=wl.metric.removeprefix("validation "), row=1, col=1)
    fig.update_yaxes(title_text="OPS", row=2, col=1)
    fig.update_layout(title=title, height=800)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)


# ---- the command --------------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="image",
                    help="image (default) or llm (AIPerf-LLM: transformers grown by function-preserving growths)")
    ap.add_argument("--preset", default=None, help="default: fashion-mnist (image), llm-kjv (llm; llm-smoke is quicker)")
    ap.add_argument("--duration", default=None, help="wall time of each arm (default 30m for image, 5m for llm)")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--arms", default="automl,random,seed", help="comma-separated subset of automl,random,seed")
    ap.add_argument("--data", default=None, help="image: directory with the four Fashion-MNIST IDX files "
                                                 "(default: Debian's /usr/share/datasets/fashion-mnist)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--html", type=Path, default=None, help="chart file (default: OUT/search_quality.html)")
    args = ap.parse_args()
    wl = WORKLOADS[args.workload]
    args.preset = args.preset or wl.preset
    args.duration_s = parse_duration(args.duration or wl.duration)
    args.arm_list = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in args.arm_list if a not in wl.arms]
    if unknown:
        ap.error(f"unknown arm(s) {', '.join(unknown)} (known: {', '.join(wl.arms)})")
    if args.workload == "llm":
        try:
            llm_preset(args.preset)
        except AiperfError as exc:
            ap.error(str(exc))
    return args


def main() -> int:
    args = parse_args()
    wl = WORKLOADS[args.workload]
    out = args.out or Path(tempfile.mkdtemp(prefix="aiperf-search-quality-"))
    html = args.html or out / "search_quality.html"
    print(f"{args.preset}, {args.slots} slots, {fmt_duration(args.duration_s)} per arm, arms "
          f"{', '.join(args.arm_list)}; runs in {out}", flush=True)

    results = []
    for arm in args.arm_list:
        run_dir = out / arm
        t0 = time.perf_counter()
        print(f"== {arm}: {wl.arms[arm][0]} -> {run_dir}", flush=True)
        try:
            r = wl.run_arm(arm, run_dir, args)
        except AiperfError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        results.append(r)
        print(f"   {r['reason']} after {time.perf_counter() - t0:.0f} s: {r['trials']} trials finished, "
              f"best {wl.metric} {_fmt(r['final'])}, integrity {'ok' if r['integrity_ok'] else 'FAILED'}, "
              f"{'valid' if r['valid'] else 'not valid'}", flush=True)
        for row in r["rows"]:
            print(f"     {row}")

    print_table(results, args.duration_s, wl)
    ahead = compare(results, wl)
    write_chart(results, html, f"{args.preset}, {fmt_duration(args.duration_s)} per search", wl)
    print(f"chart: {html}")
    return 0 if ahead else 1


if __name__ == "__main__":
    sys.exit(main())
