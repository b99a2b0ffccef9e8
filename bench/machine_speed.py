"""How fast this machine is right now, on a fixed piece of a trial's work: a speed probe.

Each core (one process each, one thread, pinned) trains the preset's seed architecture on a fixed
synthetic batch with the trial program's own `train_one_epoch` for `--seconds`, after a warm-up;
the probe's figure is the sum over the processes of train FLOPs per second (v2 FLOPs of the seed
per image x images per second). The work is the same every time, so the figure moves only with
the machine: on a VM whose neighbours come and go the same epoch of the same seed took 1.2 s in
one smoke run and 2.7 s in another an hour earlier (bench/reproducibility.py runs this before and
after every run, to tell the spread of the machine from the spread of the benchmark).

    python bench/machine_speed.py                     # smoke's seed, every core, 4 s
    python bench/machine_speed.py --preset fashion-mnist --seconds 8 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "runner"))

PROBE_BATCH = 32


def _one_core(preset: str, core: int, seconds: float) -> float:
    """Train FLOPs per second of one pinned process (run in a child: see `probe`)."""
    import torch
    from aiperf_runner.data.presets import get_preset
    from aiperf_runner.spec.flops import flops_per_image
    from aiperf_runner.spec.seeds import seed_for_preset
    from aiperf_runner.train.builder import build_module
    from aiperf_runner.train.data import Normalizer, TrialData
    from aiperf_runner.train.precision import setup_precision
    from aiperf_runner.train.trial import CosineSchedule, train_one_epoch
    from torch import nn

    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    shape = get_preset(preset)  # the input shape only: the probe needs no data
    graph = seed_for_preset(preset, shape.classes, shape.image_size)
    per_image = flops_per_image(graph, "v2").train
    torch.manual_seed(0)
    model = build_module(graph, num_classes=shape.classes).to(memory_format=torch.channels_last)
    gen = torch.Generator().manual_seed(core)
    images = torch.randint(0, 256, (PROBE_BATCH, shape.channels, shape.image_size, shape.image_size),
                           dtype=torch.uint8, generator=gen).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, shape.classes, (PROBE_BATCH,), generator=gen)

    class Repeat:
        def __init__(self, steps: int) -> None:
            self.steps = steps

        def set_epoch(self, epoch: int) -> None:
            pass

        def __len__(self) -> int:
            return self.steps

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter([(images, labels)] * self.steps)

    device = torch.device("cpu")
    precision = setup_precision("fp32", device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    schedule = CosineSchedule(optimizer, 0.01, 1_000_000)
    data = TrialData(Repeat(10), Repeat(0), 0, 0, Normalizer(preset, device, channels_last=True))  # type: ignore[arg-type]
    criterion = nn.CrossEntropyLoss()
    train_one_epoch(model, criterion, optimizer, data, precision, precision.make_scaler(), schedule, 1, device)
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        train_one_epoch(model, criterion, optimizer, data, precision, precision.make_scaler(), schedule, 1, device)
        done += 10 * PROBE_BATCH
    return done * per_image / (time.perf_counter() - started)


def probe(preset: str = "smoke", seconds: float = 4.0) -> float:
    """Train FLOP/s of the whole machine on the preset's seed: one pinned process per core, at once."""
    cores = sorted(os.sched_getaffinity(0))
    code = (f"import sys; sys.path.insert(0, {str(REPO / 'bench')!r}); import machine_speed as m; "
            f"print(m._one_core({preset!r}, int(sys.argv[1]), {seconds!r}))")
    env = {**os.environ, "PYTHONPATH": str(REPO / "runner"), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(core)], stdout=subprocess.PIPE, text=True, env=env)
             for core in cores]
    total = 0.0
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"speed probe failed (exit status {p.returncode})")
        total += float(out.strip().splitlines()[-1])
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="smoke")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    speeds = [probe(args.preset, args.seconds) for _ in range(args.repeat)]
    if args.json:
        print(json.dumps({"preset": args.preset, "flops_per_s": speeds}))
        return 0
    for s in speeds:
        print(f"{s / 1e9:.2f} GFLOP/s")
    if len(speeds) > 1:
        mean = statistics.fmean(speeds)
        print(f"mean {mean / 1e9:.2f} GFLOP/s, CV {statistics.stdev(speeds) / mean:.1%} over {len(speeds)} probes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
