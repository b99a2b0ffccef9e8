"""Images/s of the ResNet-50 seed trial on one GPU against torchvision's reference loop; then DDP
over every GPU of the node against linear scaling. A prepared check: one script, one timeout.

Single device, side by side in this process, same synthetic batch (already on the device, so data
loading is out of both figures), same batch size, same precision (default bf16):

  runner     the runner's own model (`build_module` of the ResNet-50 seed graph, channels_last as
             trials use) trained by `aiperf_runner.train.trial.train_one_epoch`: per-step learning
             rate schedule, autocast, GradScaler (pass-through in bf16), label smoothing, loss kept
             on the device
  reference  `torchvision.models.resnet50` trained by the loop of torchvision's classification
             reference (references/classification/train.py, restated: that file is no package):
             autocast forward + loss, zero_grad, backward, step, then `loss.item()` and top-1/top-5
             accuracy every step for its metric logger
  ref-graph  the same reference loop on the runner's model: tells the model's cost from the loop's

The headline is runner / reference. Then DDP: one process per GPU (NCCL; on a CPU, `--ddp-procs`
processes over gloo), each the runner's loop on its own batch of the same size, wrapped as a trial
wraps it (`train/parallel.py`'s `data_parallel`: DDP, gradients through shared memory between
CPU processes); the total images/s is set
against world size x the single-device runner figure.

    python bench/gpu_trial.py                    # a CUDA GPU: 224x224, batch 256, bf16; < 5 min on an H200
    python bench/gpu_trial.py --tiny             # anywhere: the small seed, 16x16, 2 gloo processes (seconds)
    python bench/gpu_trial.py --steps 50 --batch 192 --timeout 600

Without a CUDA GPU and without --tiny it says so and runs the tiny check. The whole script stops
itself after --timeout seconds (default 280), the DDP processes with it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from aiperf_runner.spec.seeds import resnet50, small_resnet
from aiperf_runner.train.builder import build_module
from aiperf_runner.train.distenv import DistEnv, free_port
from aiperf_runner.train.parallel import data_parallel
from aiperf_runner.train.precision import Precision, setup_precision
from aiperf_runner.train.preflight import BatchData, SameBatch
from aiperf_runner.train.trial import MOMENTUM, CosineSchedule, train_one_epoch
from torch import nn


@dataclass(frozen=True)
class Settings:
    image_size: int
    classes: int
    batch: int
    steps: int
    warmup: int
    precision: str
    device: str  # "cuda" or "cpu"
    model: str = "resnet50"  # "small": the smoke seed (tiny check), timed against itself


def _synthetic(s: Settings, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    images = torch.randn(s.batch, 3, s.image_size, s.image_size, generator=gen)
    labels = torch.randint(0, s.classes, (s.batch,), generator=gen)
    return images.to(device).contiguous(memory_format=torch.channels_last), labels.to(device)


def runner_model(s: Settings) -> nn.Module:
    if s.model == "small":
        return build_module(small_resnet(s.classes, s.image_size))
    return build_module(resnet50(s.classes, s.image_size))


def reference_model(s: Settings) -> nn.Module:
    if s.model == "small":  # no torchvision twin: the reference loop runs the runner's model
        return runner_model(s)
    import torchvision

    return torchvision.models.resnet50(num_classes=s.classes)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=MOMENTUM, weight_decay=1e-4)


def runner_loop(model: nn.Module, s: Settings, device: torch.device, precision: Precision) -> float:
    """Images/s of `train_one_epoch` over `steps` steps, after `warmup` untimed ones."""
    optimizer = _sgd(model)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    batch = _synthetic(s, device)
    schedule = CosineSchedule(optimizer, 0.1, 2)
    scaler = precision.make_scaler()
    warm = BatchData(SameBatch(batch, s.warmup), lambda x: x)
    train_one_epoch(model, criterion, optimizer, warm, precision, scaler, schedule, 1, device)
    _sync(device)
    data = BatchData(SameBatch(batch, s.steps), lambda x: x)
    t = time.perf_counter()
    totals = train_one_epoch(model, criterion, optimizer, data, precision, scaler, schedule, 2, device)
    float(totals.loss_sum)  # the epoch's one read-back, as a trial makes it
    _sync(device)
    return s.batch * s.steps / (time.perf_counter() - t)


def _accuracy(output: torch.Tensor, target: torch.Tensor, topk: tuple[int, ...]) -> list[float]:
    """torchvision reference utils.accuracy: top-k hits in per cent."""
    maxk = min(max(topk), output.shape[1])
    _, pred = output.topk(maxk, 1, True, True)
    correct = pred.t().eq(target[None])
    return [float(correct[:min(k, maxk)].flatten().sum()) * 100.0 / target.shape[0] for k in topk]


def reference_loop(model: nn.Module, s: Settings, device: torch.device, precision: Precision) -> float:
    """Images/s of torchvision's reference train_one_epoch (its per-step metric reads included)."""
    optimizer = _sgd(model)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    image, target = _synthetic(s, device)

    def step() -> None:
        with precision.autocast():
            output = model(image)
            loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        _accuracy(output, target, (1, 5))
        loss.item()

    model.train()
    for _ in range(s.warmup):
        step()
    _sync(device)
    t = time.perf_counter()
    for _ in range(s.steps):
        step()
    _sync(device)
    return s.batch * s.steps / (time.perf_counter() - t)


def single_device(s: Settings) -> dict[str, float]:
    device = torch.device("cuda:0" if s.device == "cuda" else "cpu")
    precision = setup_precision(s.precision, device)
    out: dict[str, float] = {}
    runs: list[tuple[str, Callable[[Settings], nn.Module], Any]] = [
        ("runner", runner_model, runner_loop), ("reference", reference_model, reference_loop)]
    if s.model != "small":
        runs.append(("ref-graph", runner_model, reference_loop))
    for name, make, loop in runs:
        torch.manual_seed(0)
        model = make(s).to(device).to(memory_format=torch.channels_last)
        out[name] = loop(model, s, device, precision)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def _ddp_worker(rank: int, world: int, port: int, s: Settings, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if s.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    dist.init_process_group("nccl" if s.device == "cuda" else "gloo", rank=rank, world_size=world)
    try:
        precision = setup_precision(s.precision, device)
        torch.manual_seed(0)
        model = runner_model(s).to(device).to(memory_format=torch.channels_last)
        ddp = data_parallel(model, DistEnv(rank, world, rank, world, "127.0.0.1", port), device)
        dist.barrier()
        rate = runner_loop(ddp, s, device, precision)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps({"images_per_s": rate}))
    finally:
        dist.destroy_process_group()
    # As the trial program does: torch.distributed's C++ threads can abort the interpreter's finalisation
    # (SIGABRT), which turns a finished rank into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def ddp(s: Settings, world: int, out_dir: Path) -> float:
    """Total images/s of `world` DDP processes (each times the same number of steps; the slowest
    rank's time stands for all, as every step waits for the all-reduce)."""
    mp.spawn(_ddp_worker, args=(world, free_port(), s, str(out_dir)), nprocs=world, join=True)
    rates = [json.loads((out_dir / f"rank{r}.json").read_text())["images_per_s"] for r in range(world)]
    return world * min(rates)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true",
                   help="the small smoke seed instead of ResNet-50, 16x16 images, batch 8, 10 steps, on the CPU, fp32 "
                        "unless --precision: a smoke check of this script, its figures mean nothing")
    p.add_argument("--batch", type=int, help="images per device per step (default 256; tiny 4)")
    p.add_argument("--steps", type=int, help="timed steps (default 30; tiny 3)")
    p.add_argument("--warmup", type=int, help="untimed steps first (default 10; tiny 1)")
    p.add_argument("--image-size", type=int, help="default 224; tiny 32")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16", "fp16"), help="default bf16; tiny fp32")
    p.add_argument("--ddp-procs", type=int, help="DDP processes (default: every GPU; on a CPU 2); 0 skips DDP")
    p.add_argument("--timeout", type=float, default=280.0, help="stop everything after this many seconds")
    p.add_argument("--json", type=Path, help="also write the figures here")
    return p.parse_args(argv)


def settings(args: argparse.Namespace) -> Settings:
    cuda = torch.cuda.is_available()
    if not cuda and not args.tiny:
        print("no CUDA GPU here: running the tiny CPU check instead (--tiny)", flush=True)
        args.tiny = True
    tiny = args.tiny
    return Settings(image_size=args.image_size or (16 if tiny else 224), classes=10 if tiny else 1000,
                    batch=args.batch or (8 if tiny else 256), steps=args.steps or (10 if tiny else 30),
                    warmup=args.warmup if args.warmup is not None else (2 if tiny else 10),
                    precision=args.precision or ("fp32" if tiny else "bf16"),
                    device="cpu" if tiny or not cuda else "cuda", model="small" if tiny else "resnet50")


def _on_timeout(signum: int, frame: Any) -> None:
    print("gpu_trial: timed out", file=sys.stderr, flush=True)
    import multiprocessing

    for child in multiprocessing.active_children():  # the DDP processes this script spawned
        child.kill()
    os._exit(124)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    previous = signal.signal(signal.SIGALRM, _on_timeout)
    signal.alarm(max(1, int(args.timeout)))
    try:
        figures = measure(args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    s = settings(args)
    where = torch.cuda.get_device_name(0) if s.device == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    model = "small smoke seed" if s.model == "small" else "ResNet-50 seed"
    print(f"{model}, {s.image_size}x{s.image_size}, {s.classes} classes, batch {s.batch}, {s.precision}, "
          f"{s.steps} timed steps after {s.warmup}, on {where}", flush=True)
    figures: dict[str, Any] = {"settings": s.__dict__, "single": single_device(s)}
    one = figures["single"]
    for name in one:
        print(f"  {name:<10} {one[name]:10.1f} images/s", flush=True)
    figures["ratio"] = one["runner"] / one["reference"]
    print(f"runner / reference: {figures['ratio']:.3f}"
          + (f"   (runner / ref-graph: {one['runner'] / one['ref-graph']:.3f})" if "ref-graph" in one else ""))
    world = args.ddp_procs if args.ddp_procs is not None else (torch.cuda.device_count() if s.device == "cuda" else 2)
    if world >= 1:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="aiperf-gpu-trial-") as tmp:
            total = ddp(s, world, Path(tmp))
        linear = world * one["runner"]
        figures["ddp"] = {"world": world, "images_per_s": total, "linear": linear, "efficiency": total / linear}
        print(f"DDP x{world}: {total:.1f} images/s against linear {linear:.1f}: {total / linear:.1%} of linear")
    return figures


if __name__ == "__main__":
    sys.exit(main())
