"""Reference runs of an AIPerf-LLM preset, and the validation-loss gate they support.

Runs `aiperf-runner run --workload llm` --runs times (default 5) one after the other, each for --duration with
--slots, verifies each, and prints each run's best validation loss, trials and score, then the worst best loss
and the gate it supports: the worst reference run's loss plus --margin (default 0.25 nats), so that an honest
run on a machine as small as the reference one passes, while a run that did not learn the text's structure
(about 3.0 nats for a model of byte frequencies, 0.996 the text's floor) does not. The preset's gate
(spec/llmrules.py) is printed beside it.

    python bench/llm_gate.py                       # 5 runs of 2 minutes, 2 slots
    python bench/llm_gate.py --runs 1 --duration 1m

Bounded: --runs x --duration, plus a few seconds a run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from aiperf_runner.cli.options import parse_duration
from aiperf_runner.run.llmrun import LlmRun, LlmRunConfig, summary
from aiperf_runner.spec.llmrules import llm_preset
from aiperf_runner.spec.verify import verify


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="llm-smoke")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", default="2m")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--margin", type=float, default=0.25)
    args = ap.parse_args()
    preset = llm_preset(args.preset)
    bests = []
    print(f"{'run':>4} {'best loss':>10} {'trials':>7} {'score GOPS':>11} {'regulated':>10}  valid  morphisms")
    with tempfile.TemporaryDirectory(prefix="aiperf-llm-gate-") as tmp:
        for i in range(args.runs):
            run_dir = Path(tmp) / f"run{i}"
            config = LlmRunConfig(preset=args.preset, slots=args.slots, duration_s=parse_duration(args.duration),
                                  seed=i)
            LlmRun.create(config, run_dir, say=lambda _: None).run()
            report, done = verify(run_dir), summary(run_dir)
            best = report["best_loss"]
            bests.append(best if best is not None else float("inf"))
            print(f"{i:4d} {best:10.4f} {report['trials_finished']:7d} {report['score_ops'] / 1e9:11.2f} "
                  f"{report['regulated_score_ops'] / 1e9:10.2f}  {'yes' if report['valid'] else 'no ':3}  "
                  f"{', '.join(done['morphisms'])}")
    worst = max(bests)
    print(f"best losses: mean {statistics.fmean(bests):.4f}, worst {worst:.4f}; gate supported (worst + "
          f"{args.margin}): {worst + args.margin:.3f} nats; the preset's gate: {preset.loss_gate} nats; "
          f"floor {'unknown' if preset.floor_nats is None else f'{preset.floor_nats:.3f}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
