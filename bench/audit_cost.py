"""What the re-execution audit costs and what it tells apart (rules 3.0, docs/rules.md "proof of the work").

Per preset (smoke; fashion-mnist when its data is installed): the preset's seed trial trained for one
epoch with one thread, committing every `commit_every_steps` steps, then each of its segments
re-executed as the service does (train/segment.py, here with two threads: another machine's rounding)
and again with a quarter of its steps left out, as a site that skipped them would have committed:

- the honest replays' distance to the committed state against the skipped ones' (the tolerance lies
  between: both sides printed), and the seconds one segment's re-execution takes;
- the bytes of one state and of what a site uploads for 17 segments and the best checkpoint.

ImageNet is estimated from this CPU: a ResNet-50 training step on a batch of 224-px images, timed here,
scaled to a segment of 16 steps of a 2,048-image global batch (8 GPUs x 256), plus the best
checkpoint's evaluation on 50,000 images. Last, the detection probability for skipped shares of the work.

    python bench/audit_cost.py
    python bench/audit_cost.py --segments 4 --skip-imagenet
    python bench/audit_cost.py --precision bf16 --skip-imagenet   # the tolerance at another precision
    python bench/audit_cost.py --device cuda --precision bf16      # a GPU's trials, replayed on this CPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "runner"))
sys.path.insert(0, str(REPO))

FASHION = Path("/usr/share/datasets/fashion-mnist")


def train_one_epoch(trial_dir: Path, preset: str, every: int, data: str | None, precision: str,
                    device: str) -> None:
    import torch  # noqa: F401 - fail early without torch
    from aiperf_runner.data.presets import get_preset
    from aiperf_runner.search.hparams import defaults
    from aiperf_runner.spec.seeds import seed_for_preset

    p = get_preset(preset)
    graph = seed_for_preset(preset, p.classes, p.image_size)
    trial_dir.mkdir(parents=True)
    (trial_dir / "graph.json").write_text(graph.dumps())
    (trial_dir / "hparams.json").write_text(json.dumps(defaults(preset)))
    (trial_dir / "trial.json").write_text(json.dumps({
        "trial": trial_dir.name, "epoch_budget": 1, "precision": precision, "preset": preset, "data": data,
        "dataset": p.dataset(data), "seed": 7, "device_type": device, "num_classes": p.classes,
        "image_size": p.image_size, "commit_every_steps": every, "keep_states": True, "cpu_bind": False}))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{REPO / 'runner'}:{REPO}"}
    out = subprocess.run([sys.executable, "-m", "aiperf_runner.train.trial", str(trial_dir)], env=env,
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"the trial failed: {out.stderr[-2000:]}")


def measure(preset: str, every: int, segments: int, data: str | None, precision: str,
            device: str, audit_device: str) -> dict[str, float]:
    import torch
    from aiperf_runner.spec.proof import segments_of_line
    from aiperf_runner.train.segment import replay_segment
    from aiperf_runner.train.trainstate import state_path

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "t0000"
        t0 = time.perf_counter()
        train_one_epoch(d, preset, every, data, precision, device)
        trained_s = time.perf_counter() - t0
        line = next(json.loads(x) for x in (d / "events.jsonl").read_text().splitlines() if '"epoch_states"' in x)
        segs = segments_of_line(line, 0)
        step = max(1, len(segs) // segments)
        chosen = segs[::step][:segments]
        torch.set_num_threads(2)
        honest, skipped, seconds = [], [], []
        for seg in chosen:
            start, end = state_path(d, seg.start).read_bytes(), state_path(d, seg.end).read_bytes()
            t = time.perf_counter()
            v = replay_segment(d, start, end, epoch=1, first=seg.first, last=seg.last, steps=seg.steps, world=1,
                               data=data, preset_name=preset, device_name=audit_device)
            seconds.append(time.perf_counter() - t)
            honest.append(float(v["ratio"]))
            cut = max(1, (seg.last - seg.first) // 4)
            v = replay_segment(d, start, end, epoch=1, first=seg.first, last=seg.last - cut, steps=seg.steps,
                               world=1, data=data, preset_name=preset, device_name=audit_device)
            skipped.append(float(v["ratio"]))
        size = state_path(d, segs[0].end).stat().st_size
    return {"steps": float(line["steps"]), "epoch_s": trained_s, "honest_max": max(honest),
            "honest_median": statistics.median(honest), "skipped_min": min(skipped),
            "segment_s": statistics.median(seconds), "state_bytes": float(size), "segments": float(len(chosen))}


def imagenet_step_seconds(batch: int) -> float:
    import torch
    import torchvision

    torch.set_num_threads(os.cpu_count() or 1)
    model = torchvision.models.resnet50()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,))
    times = []
    for _ in range(3):
        t = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t)
    return min(times[1:]) / batch  # per image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=6, help="segments re-executed per preset")
    parser.add_argument("--audit-segments", type=int, default=17)
    parser.add_argument("--skip-imagenet", action="store_true")
    parser.add_argument("--precision", default="fp32", help="the trials' precision (fp32, bf16, ...)")
    parser.add_argument("--device", default="cpu", help="where the trial trains (cpu, cuda): a device class")
    parser.add_argument("--audit-device", default="cpu", help="where the audit re-executes (the service's default: cpu)")
    args = parser.parse_args()
    from aiperf_runner.spec import proof, rules

    th = rules.thresholds()
    tolerance = rules.replay_tolerance(th, args.precision)
    presets = [("smoke", None)] + ([("fashion-mnist", str(FASHION))] if FASHION.exists() else [])
    for preset, data in presets:
        every = proof.every_steps(th, preset) or 16
        m = measure(preset, every, args.segments, data, args.precision, args.device, args.audit_device)
        upload = (2 * args.audit_segments + 1) * m["state_bytes"]
        audit_s = args.audit_segments * m["segment_s"]
        print(f"{preset} ({args.precision}, trained on {args.device}, re-executed on {args.audit_device}): "
              f"{m['steps']:.0f} steps an epoch, segments of {every} steps, "
              f"{m['segments']:.0f} re-executed")
        print(f"  honest replay (2 threads vs 1): max {m['honest_max']:.3g}, median {m['honest_median']:.3g} of the "
              f"segment's move | a quarter skipped: min {m['skipped_min']:.3g} | tolerance {tolerance:g} "
              f"(margins: x{tolerance / max(m['honest_max'], 1e-12):.1f} over honest, "
              f"x{m['skipped_min'] / tolerance:.1f} under skipped)")
        print(f"  one segment re-executed in {m['segment_s']:.2f} s (the epoch trained in {m['epoch_s']:.1f} s with "
              f"start-up); {args.audit_segments} segments: {audit_s:.0f} s of audit")
        print(f"  a state is {m['state_bytes'] / 1e6:.2f} MB; a site uploads at most {upload / 1e6:.1f} MB "
              f"({2 * args.audit_segments} segment ends and the best checkpoint)")
    if not args.skip_imagenet:
        per_image = imagenet_step_seconds(8)
        images = 16 * 2048
        segment_s = per_image * images
        state = 25_557_032 * 4 * 2 + 53_120 * 4 * 3  # ResNet-50: parameters, momentum, BatchNorm buffers
        eval_s = per_image / 3 * 50_000  # a forward is about a third of a training step
        print(f"imagenet (estimated): a ResNet-50 training step takes {per_image * 1000:.0f} ms an image on this CPU "
              f"({os.cpu_count()} cores); a segment of 16 steps x 2,048 images: {segment_s / 3600:.1f} CPU-hours; "
              f"{args.audit_segments} segments and the best checkpoint's 50,000-image evaluation: "
              f"{(args.audit_segments * segment_s + eval_s) / 3600:.0f} hours here (a GPU audit worker: "
              f"AIPERF_AUDIT_DEVICE=cuda); upload {(2 * args.audit_segments + 1) * state / 1e9:.1f} GB")
    print("detection probability, " + ", ".join(
        f"{int(f * 100)} % skipped: {proof.detection_probability(f, args.audit_segments):.4f}" for f in (0.1, 0.25, 0.5))
        + f" ({args.audit_segments} segments; segments_needed(0.25, 0.99) = {proof.segments_needed(0.25, 0.99)})")


if __name__ == "__main__":
    main()
