"""Does the architecture search do real work? Three searches on fashion-mnist, the same wall time each.

    python bench/search_quality.py                        # 3 x 30 minutes, 2 slots (1 h 30 in all)
    python bench/search_quality.py --duration 10m         # shorter
    python bench/search_quality.py --arms automl,seed --duration 4m --out runs/sq

Arms, each a real `aiperf-runner run --preset fashion-mnist` (local backend, the real trial
program), one after the other in this invocation:

  automl   the search as built: network morphisms chosen by the GP (edit-distance kernel, UCB,
           simulated annealing), TPE hyper-parameters (controller.make_search)
  random   random morphism chains from a random trained architecture, the same TPE policy
           (search/baselines.py RandomMorphismSearch)
  seed     the seed architecture for every trial, TPE hyper-parameters from the first trial on
           (search/baselines.py SeedOnlySearch)

Printed: for each arm, trials, architectures, morphisms used, the best validation accuracy at
quarters of the run and at its end, the final score and regulated score (spec/verify.py, as the
service computes them), slot utilisation; then automl's best accuracy and regulated score against
each baseline (error-rate ratio: baseline's 1 - accuracy over automl's; > 1 means automl ahead).
Written: a plotly HTML chart (best accuracy and regulated score over time, the arms overlaid).
Exit status 1 when automl ends behind a baseline that ran.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "runner"))

from aiperf_runner.cli.options import parse_duration  # noqa: E402
from aiperf_runner.data.presets import PresetError  # noqa: E402
from aiperf_runner.run.controller import Controller, ControllerError, RunConfig, make_search  # noqa: E402
from aiperf_runner.run.progress import fmt_duration  # noqa: E402
from aiperf_runner.run.state import RunState  # noqa: E402
from aiperf_runner.search.baselines import random_search_factory, seed_only_factory  # noqa: E402
from aiperf_runner.spec.flops import flops_per_image  # noqa: E402
from aiperf_runner.spec.graph import load_graph  # noqa: E402
from aiperf_runner.spec.verify import verify  # noqa: E402

ARMS = {
    "automl": ("AutoML: morphisms + GP + TPE", make_search),
    "random": ("random morphisms + TPE", random_search_factory),
    "seed": ("seed architecture + TPE", seed_only_factory),
}
QUARTERS = (0.25, 0.5, 0.75, 1.0)


def run_arm(arm: str, run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One arm's run, then its figures from the log (verify: the service's computation)."""
    config = RunConfig(preset="fashion-mnist", slots=args.slots, duration_s=args.duration_s, backend="local",
                       data=args.data, seed=args.seed, system_name=f"search-quality {arm}")
    controller = Controller.create(config, run_dir, search_factory=ARMS[arm][1])

    def stop(signum: int, frame: Any) -> None:
        controller.request_stop("stopped")

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        reason = controller.run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    report = verify(run_dir)
    state = RunState.load(run_dir)
    # Before the first epoch there is no accuracy yet (the series says 0): None, not a point at 0.
    series = [(p["t"], p["max_accuracy"] or None, p["regulated"]) for p in report["series"]]
    duration = args.duration_s

    def best_at(t: float) -> float | None:
        seen = [acc for when, acc, _reg in series if when <= t + 1e-6 and acc is not None]
        return max(seen) if seen else None

    return {"arm": arm, "reason": reason, "run_dir": run_dir, "series": series, "rows": trial_rows(run_dir, state),
            "best": [best_at(q * duration) for q in QUARTERS],
            "max_accuracy": report["max_accuracy"], "score": report["score_ops"],
            "regulated": report["regulated_score_ops"], "integrity_ok": report["integrity_ok"],
            "trials": state.count("finished"), "architectures": len({t.arch_hash for t in state.trials.values()}),
            "morphisms": state.morphism_counts(), "utilisation": state.slot_utilisation(state.finished_at)}


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
                    f"best {_acc(tr.epoch_best)}  {tr.status:9} {tr.hparam_source:9} bs {hp.get('batch_size')} "
                    f"lr {float(hp.get('lr', 0)):.3f}  {'+'.join(tr.morphisms) or '-'}")
    return rows


def _acc(value: float | None) -> str:
    return "   -  " if value is None else f"{value:.4f}"


def print_table(results: list[dict[str, Any]], duration_s: float) -> None:
    from aiperf_runner.run.progress import fmt_ops

    marks = "  ".join(f"@{fmt_duration(q * duration_s)}".rjust(9) for q in QUARTERS)
    print("\nbest validation accuracy at quarters of the run (@ elapsed time), final score and regulated score")
    print(f"{'arm':8} {'trials':>6} {'archs':>5}  {marks}  {'score':>12} {'regulated':>12} {'slot use':>8}  morphisms")
    for r in results:
        best = "  ".join(_acc(b).rjust(9) for b in r["best"])
        util = "-" if r["utilisation"] is None else f"{r['utilisation']:.1%}"
        morph = ", ".join(f"{k} {v}" for k, v in sorted(r["morphisms"].items())) or "-"
        print(f"{r['arm']:8} {r['trials']:>6} {r['architectures']:>5}  {best}  {fmt_ops(r['score']):>12} "
              f"{fmt_ops(r['regulated']):>12} {util:>8}  {morph}")


def compare(results: list[dict[str, Any]]) -> bool:
    """Print automl against each baseline; False when automl ends behind one."""
    by_arm = {r["arm"]: r for r in results}
    automl = by_arm.get("automl")
    if automl is None or automl["max_accuracy"] is None:
        return True
    ahead = True
    for name in ("random", "seed"):
        base = by_arm.get(name)
        if base is None or base["max_accuracy"] is None:
            continue
        err_ratio = (1 - base["max_accuracy"]) / max(1 - automl["max_accuracy"], 1e-9)
        reg_ratio = automl["regulated"] / base["regulated"] if base["regulated"] else float("inf")
        diff = automl["max_accuracy"] - base["max_accuracy"]
        verdict = "ahead" if diff > 0 else ("level" if diff == 0 else "BEHIND")
        print(f"automl vs {name:6}: best accuracy {automl['max_accuracy']:.4f} vs {base['max_accuracy']:.4f} "
              f"({diff * 100:+.2f} points, {verdict}); error-rate ratio {err_ratio:.3f}; "
              f"regulated-score ratio {reg_ratio:.3f}")
        ahead = ahead and diff >= 0
    return ahead


def write_chart(results: list[dict[str, Any]], path: Path, duration_s: float) -> None:
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("Best validation accuracy", "Regulated score (OPS)"))
    colours = {"automl": "#1f77b4", "random": "#ff7f0e", "seed": "#2ca02c"}
    for r in results:
        minutes = [t / 60 for t, _a, _g in r["series"]]
        label = ARMS[r["arm"]][0]
        fig.add_scatter(x=minutes, y=[a for _t, a, _g in r["series"]], name=label, mode="lines", line_shape="hv",
                        line={"color": colours[r["arm"]]}, legendgroup=r["arm"], row=1, col=1)
        fig.add_scatter(x=minutes, y=[g for _t, _a, g in r["series"]], name=label, mode="lines",
                        line={"color": colours[r["arm"]]}, legendgroup=r["arm"], showlegend=False, row=2, col=1)
    fig.update_xaxes(title_text="minutes since run start", row=2, col=1)
    fig.update_yaxes(title_text="accuracy", row=1, col=1)
    fig.update_yaxes(title_text="OPS", row=2, col=1)
    fig.update_layout(title=f"fashion-mnist, {fmt_duration(duration_s)} per search", height=800)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", default="30m", help="wall time of each arm (default 30m; e.g. 5m to shorten)")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--arms", default="automl,random,seed", help="comma-separated subset of automl,random,seed")
    ap.add_argument("--data", default=None, help="directory with the four Fashion-MNIST IDX files "
                                                 "(default: Debian's /usr/share/datasets/fashion-mnist)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--html", type=Path, default=None, help="chart file (default: OUT/search_quality.html)")
    args = ap.parse_args()
    args.duration_s = parse_duration(args.duration)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        ap.error(f"unknown arm(s) {', '.join(unknown)} (known: {', '.join(ARMS)})")
    out = args.out or Path(tempfile.mkdtemp(prefix="aiperf-search-quality-"))
    html = args.html or out / "search_quality.html"
    print(f"fashion-mnist, {args.slots} slots, {fmt_duration(args.duration_s)} per arm, arms {', '.join(arms)}; "
          f"runs in {out}", flush=True)

    results = []
    for arm in arms:
        run_dir = out / arm
        t0 = time.perf_counter()
        print(f"== {arm}: {ARMS[arm][0]} -> {run_dir}", flush=True)
        try:
            r = run_arm(arm, run_dir, args)
        except (ControllerError, PresetError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        results.append(r)
        print(f"   {r['reason']} after {time.perf_counter() - t0:.0f} s: {r['trials']} trials finished, "
              f"best accuracy {_acc(r['max_accuracy'])}, integrity {'ok' if r['integrity_ok'] else 'FAILED'}",
              flush=True)
        for row in r["rows"]:
            print(f"     {row}")

    print_table(results, args.duration_s)
    ahead = compare(results)
    write_chart(results, html, args.duration_s)
    print(f"chart: {html}")
    return 0 if ahead else 1


if __name__ == "__main__":
    sys.exit(main())
