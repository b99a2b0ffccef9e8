"""Time to propose the next architecture at 10, 50, 100, 1,000 and 20,000 results (target < 1 s at
the largest), side by side with NNI 3.0's NetworkMorphismTuner at 10 and 50 results.

aiperf-runner: `ArchitectureSearch` on the small ResNet seed (32x32, 10 classes). The history is
pre-filled with N distinct architectures made by random chains of 0-6 morphisms (deeper / wider /
skip) from the seed, each observed with a synthetic accuracy (smooth in the layer count, plus
noise). Then P proposals are timed, each followed by the observation of a synthetic result, so
every timed proposal includes the refit of the Gaussian process, as in a run.

NNI: `NetworkMorphismTuner(task="cv", input_width=32, ...)` on its own default seed (CnnGenerator),
looped as NNI's manager would (generate_parameters / receive_trial_result), run as a subprocess in
the separate virtual environment `.venv-nni` (NNI is a benchmark peer only, never a dependency of
the runner). Its history is pre-filled the same way (random morphism neighbours via NNI's own
`transform`, synthetic rewards), then P proposals are timed. Set it up with
`python3 -m venv .venv-nni && .venv-nni/bin/pip install nni torch==2.13.0` (NNI 3.0;
the patch NNI needs for numpy >= 2.4 is applied here). Without the venv the NNI column is skipped
with a message.

Both run in one invocation on the same machine; the 1-minute load average is printed, since on a
shared machine wall times are noisy.

    python bench/search_latency.py                          # 10/50/100/1000/20000 ours, 10/50 NNI (10-20 min)
    python bench/search_latency.py --skip-nni
    python bench/search_latency.py --nni-points 10 --nni-proposals 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aiperf_runner.search.bayesian import ArchitectureSearch  # noqa: E402
from aiperf_runner.search.morphism import random_morphism  # noqa: E402
from aiperf_runner.spec.seeds import small_resnet  # noqa: E402

TARGET_S = 1.0
NNI_VENV = REPO / ".venv-nni"


def synthetic_accuracy(n_layers: int, base_layers: int, rng: random.Random) -> float:
    return 0.75 + 0.15 * math.tanh((n_layers - base_layers) / 25.0) + rng.gauss(0.0, 0.01)


def bench_ours(n_results: int, proposals: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    base = small_resnet()
    search = ArchitectureSearch(base, rng_seed=seed)
    t0 = time.perf_counter()
    seen: set[str] = set()
    first = search.propose()  # the seed itself
    seen.add(first.arch_hash)
    search.observe(first.arch_hash, synthetic_accuracy(len(base.layers), len(base.layers), rng))
    while len(seen) < n_results:
        g = base
        for _ in range(rng.randint(1, 6)):
            g, _desc = random_morphism(g, rng)
        h = g.hash()
        if h in seen:
            continue
        seen.add(h)
        search.register(g, base.hash(), [])
        search.observe(h, synthetic_accuracy(len(g.layers), len(base.layers), rng))
    search.best()  # absorb the pre-fill (distance rows) outside the timed part
    prefill_s = time.perf_counter() - t0
    times = []
    for _ in range(proposals):
        t = time.perf_counter()
        p = search.propose()
        times.append(time.perf_counter() - t)
        if p is None:
            break
        search.observe(p.arch_hash, synthetic_accuracy(len(p.graph.layers), len(base.layers), rng))
    return {"results": n_results, "times": times, "prefill_s": prefill_s}


NNI_SCRIPT = r'''
import json, math, os, random, sys, time
import numpy as np
from nni.algorithms.hpo.networkmorphism_tuner import bayesian
_acq = bayesian.BayesianOptimizer.acq
bayesian.BayesianOptimizer.acq = lambda self, g: float(np.asarray(_acq(self, g)).ravel()[0])
from nni.algorithms.hpo.networkmorphism_tuner import NetworkMorphismTuner
from nni.algorithms.hpo.networkmorphism_tuner.bayesian import contain
from nni.algorithms.hpo.networkmorphism_tuner.graph import graph_to_json, json_to_graph
from nni.algorithms.hpo.networkmorphism_tuner.graph_transformer import transform

points = [int(x) for x in sys.argv[1].split(",")]
proposals = int(sys.argv[2])
rng = random.Random(0)
random.seed(0)

def reward(graph, base):
    return 0.75 + 0.15 * math.tanh((len(graph.layer_list) - base) / 25.0) + rng.gauss(0.0, 0.01)

for n_results in points:
    tuner = NetworkMorphismTuner(task="cv", input_width=32, input_channel=3, n_output_node=10,
                                 optimize_mode="maximize", path=f"model_path_{n_results}", verbose=False)
    t0 = time.perf_counter()
    js = tuner.generate_parameters(0)  # the initial CnnGenerator graph, no optimisation
    g0 = json_to_graph(js)
    base = len(g0.layer_list)
    tuner.receive_trial_result(0, None, reward(g0, base))
    pid = 1
    while len(tuner.history) < n_results:
        father = rng.choice([h["model_id"] for h in tuner.history])
        neighbours = transform(tuner.load_model_by_id(father))
        if not neighbours:
            continue
        g = neighbours[0]
        desc = g.extract_descriptor()
        if contain(tuner.descriptors, desc):
            continue
        model_id = tuner.model_count
        tuner.model_count += 1
        js = graph_to_json(g, os.path.join(tuner.path, f"{model_id}.json"))
        tuner.total_data[pid] = (js, father, model_id)
        tuner.descriptors.append(desc)
        tuner.receive_trial_result(pid, None, reward(g, base))
        pid += 1
    prefill = time.perf_counter() - t0
    for k in range(proposals):
        t = time.perf_counter()
        js = tuner.generate_parameters(pid)
        dt = time.perf_counter() - t
        print(json.dumps({"results": len(tuner.history), "point": n_results, "seconds": dt,
                          "prefill_s": prefill}), flush=True)
        tuner.receive_trial_result(pid, None, reward(json_to_graph(js), base))
        pid += 1
'''


def bench_nni(points: list[int], proposals: int, timeout: float) -> tuple[dict[int, list[float]], str]:
    python = NNI_VENV / "bin" / "python"
    if not python.exists():
        return {}, (f"NNI skipped: {NNI_VENV} not found (python3 -m venv .venv-nni && "
                    ".venv-nni/bin/pip install nni torch==2.13.0)")
    out: dict[int, list[float]] = {p: [] for p in points}
    note = ""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([str(python), "-c", NNI_SCRIPT, ",".join(map(str, points)), str(proposals)],
                                cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            note = f"NNI stopped after {timeout:.0f} s (--nni-timeout); figures below are what it finished"
        for line in stdout.splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            out[rec["point"]].append(rec["seconds"])
        if proc.returncode not in (0, None, -9) and not note:
            note = "NNI failed: " + stderr.strip().splitlines()[-1] if stderr.strip() else "NNI failed"
    return out, note


def fmt(times: list[float]) -> str:
    if not times:
        return "-"
    return f"median {statistics.median(times):7.3f} s  max {max(times):7.3f} s  (n={len(times)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="10,50,100,1000,20000", help="result counts for aiperf-runner")
    ap.add_argument("--proposals", type=int, default=5, help="timed proposals per point (aiperf-runner)")
    ap.add_argument("--nni-points", default="10,50")
    ap.add_argument("--nni-proposals", type=int, default=3, help="timed proposals per point (NNI; tens of s each)")
    ap.add_argument("--nni-timeout", type=float, default=1500.0, help="seconds for the whole NNI part")
    ap.add_argument("--skip-nni", action="store_true")
    args = ap.parse_args()
    points = [int(x) for x in args.points.split(",") if x]
    nni_points = [int(x) for x in args.nni_points.split(",") if x]

    print(f"search latency: time to propose the next architecture (2-core class machine; "
          f"load average {os.getloadavg()[0]:.1f} at start)")
    ours = {}
    for n in points:
        r = bench_ours(n, args.proposals)
        ours[n] = r["times"]
        print(f"  aiperf-runner  {n:5d} results  {fmt(r['times'])}   [pre-fill {r['prefill_s']:.1f} s]", flush=True)

    nni: dict[int, list[float]] = {}
    if args.skip_nni:
        print("  NNI skipped (--skip-nni)")
    else:
        nni, note = bench_nni(nni_points, args.nni_proposals, args.nni_timeout)
        for n in nni_points:
            if nni.get(n):
                print(f"  NNI 3.0        {n:5d} results  {fmt(nni[n])}")
        if note:
            print(f"  {note}")

    print("\nside by side (median seconds per proposal):")
    print(f"  {'results':>8}  {'aiperf-runner':>14}  {'NNI 3.0':>10}  {'NNI / ours':>10}")
    for n in sorted(set(points) | set(nni_points)):
        a = statistics.median(ours[n]) if ours.get(n) else None
        b = statistics.median(nni[n]) if nni.get(n) else None
        ratio = f"{b / a:10.0f}x" if a and b else f"{'-':>11}"
        print(f"  {n:>8}  {f'{a:.3f}' if a is not None else '-':>14}  {f'{b:.1f}' if b is not None else '-':>10}  {ratio}")
    worst_point = max(points)
    worst = statistics.median(ours[worst_point]) if ours.get(worst_point) else float("inf")
    ok = worst < TARGET_S
    print(f"\ntarget: < {TARGET_S:.0f} s per proposal at {worst_point} results: median {worst:.3f} s -> "
          f"{'met' if ok else 'NOT met'}; load average now {os.getloadavg()[0]:.1f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
