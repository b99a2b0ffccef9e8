"""How much of a short run's score spread is the search's path? The architecture search alone, replayed
in simulated time, with the preset's FLOPs bound at several ratios side by side.

On a CPU, a smoke epoch takes about as long whatever the architecture within the bounds (five
5-minute runs on 3 December: 5,904-6,239 images a second at 1.07e7-1.23e7 FLOPs per image), so a
smoke run's score follows the FLOPs per image of the architectures its search happened to train,
and those follow its path: morphisms only grow a network, and which architectures get expanded
depends on accuracies that differ between architectures by little more than their noise.

This replays that loop without training: the architecture search as a run builds it
(`proposals.make_search`: the preset's seed and bounds, search seed 0), `slots` slots each taking
the next of the ready proposals (two ready, one proposed per start, as the controller's proposal
buffer does at two slots), epochs of
`--epoch-s` seconds with 5 % log-normal jitter, epoch budgets 1, 2, 3 then 4 per round as smoke's,
and accuracies from a model fitted on those five runs' results (four-epoch trials: 0.9604 + 0.0068
ln(FLOPs / seed's FLOPs), residual sigma 0.0038, quantised to the 2,000 validation images; 0.03
lower per epoch short of four). Run k draws jitter and noise from seed k, as real runs differ by
their timings and results, not by their search seed. For each `--ratios` bound it prints the mean
over K runs of the epoch-weighted FLOPs per image (as a ratio to the seed's) and its coefficient of
variation: the part of the score's CV that the search's path adds on such a machine.

    python bench/search_spread.py                       # bounds 2x and 3x, 20 runs each (about 5 min)
    python bench/search_spread.py --ratios 1.5,2,2.5,3 --runs 12
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import math
import random
import statistics
import sys
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "runner"))

from aiperf_runner.data.presets import get_preset  # noqa: E402
from aiperf_runner.search.bayesian import Proposal  # noqa: E402
from aiperf_runner.search.buffer import make_search  # noqa: E402
from aiperf_runner.spec.flops import flops_per_image  # noqa: E402

BUDGETS = (1, 2, 3, 4)
VAL_IMAGES = 2000


def accuracy(ratio: float, budget: int, rng: random.Random) -> float:
    """A trial's result under the model fitted on real smoke runs (see the module docstring)."""
    acc = 0.9604 + 0.0068 * math.log(ratio) - 0.03 * (BUDGETS[-1] - budget) + rng.gauss(0, 0.0038)
    return round(acc * VAL_IMAGES) / VAL_IMAGES


def replay(flops_ratio: float, run: int, duration_s: float, slots: int, epoch_s: float) -> float:
    """One simulated run: the epoch-weighted mean of the trained architectures' FLOPs per image,
    over the seed's (epochs cut by the end of the run counted for the part inside it)."""
    preset = dataclasses.replace(get_preset("smoke"), max_flops_ratio=flops_ratio)
    search, _ = make_search(preset, {"classes": preset.classes, "image_size": preset.image_size}, seed=0)
    seed_flops = flops_per_image(search.seed_graph, "v2").train
    rng = random.Random(run)
    ready: deque[Proposal] = deque(search.propose_batch(slots))
    running: list[tuple[float, int, int, Proposal, float, int]] = []
    started = 0
    work = epochs = 0.0

    def start(slot: int, now: float) -> None:
        nonlocal started
        proposal = ready.popleft()
        budget = BUDGETS[min(started // slots, len(BUDGETS) - 1)]
        ratio = flops_per_image(proposal.graph, "v2").train / seed_flops
        length = sum(epoch_s * math.exp(rng.gauss(0, 0.05)) for _ in range(budget))
        heapq.heappush(running, (now + length, started, slot, proposal, ratio, budget))
        started += 1
        ready.extend(search.propose_batch(1))

    for slot in range(slots):
        start(slot, 0.0)
    while running:
        end, _, slot, proposal, ratio, budget = heapq.heappop(running)
        if end > duration_s:  # cut by the end of the run: the part of its epochs inside it
            inside = max(0.0, min(1.0, (duration_s - (end - budget * epoch_s)) / (budget * epoch_s)))
            work += ratio * budget * inside
            epochs += budget * inside
            continue
        work += ratio * budget
        epochs += budget
        search.observe(proposal.arch_hash, accuracy(ratio, budget, rng))
        start(slot, end)
    return work / epochs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ratios", default="2,3", help="the FLOPs bounds to compare, times the seed's (default 2,3)")
    ap.add_argument("--runs", type=int, default=20, help="simulated runs per bound (default 20)")
    ap.add_argument("--duration", type=float, default=300.0, help="simulated run length, seconds (default 300)")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--epoch-s", type=float, default=1.33,
                    help="seconds an epoch takes (default 1.33: 5-minute 2-slot runs trained 443-468 epochs)")
    args = ap.parse_args()
    print(f"smoke search replayed: {args.slots} slots, {args.duration:g} s, {args.epoch_s:g} s an epoch, "
          f"{args.runs} runs per bound")
    print(f"{'bound':>6} {'FLOP/img / seed':>16} {'CV':>6} {'min':>6} {'max':>6} {'replay s':>9}")
    for ratio in (float(r) for r in args.ratios.split(",")):
        t0 = time.perf_counter()
        values = [replay(ratio, k, args.duration, args.slots, args.epoch_s) for k in range(args.runs)]
        mean = statistics.mean(values)
        cv = statistics.stdev(values) / mean if len(values) > 1 else 0.0
        print(f"{ratio:>5g}x {mean:>16.3f} {cv:>6.1%} {min(values):>6.2f} {max(values):>6.2f} "
              f"{time.perf_counter() - t0:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
