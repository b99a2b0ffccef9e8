"""Re-execute one committed segment of a trial, as the service's audit does (spec/proof.py).

    python -m aiperf_runner.train.segment TRIAL_DIR START END --epoch E --first A --last B --steps S
        --world W [--data DIR] [--device cpu|cuda] [--preset NAME] [--tolerance R]
    python -m aiperf_runner.train.segment --plan PLAN.json      (many segments, one process)

TRIAL_DIR holds the trial's files from the bundle; only its graph, hyper-parameters, seed, epoch
budget, learning-rate scaling and precision are read. The data, its size and its augmentation are
the preset's (the service's copy), never the trial's. START and END are the committed state files.

The segment is trained again from START: steps A+1..B of epoch E, each rank's batches in the
order its sampler gives them and its random numbers from the segment's seed, the ranks' gradients
averaged as data parallelism averages them and BatchNorm's running statistics rank 0's (the
committed state is rank 0's). The replayed state is compared with END: equal digests, or the
distance between the two states relative to the distance the segment moved the state
(`ratio` = |replayed - END| / |END - START| over the parameters and momentum), which the rules
bound per precision and device class (docs/rules.md). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aiperf_runner.data.presets import get_preset
from aiperf_runner.spec.graph import Graph
from aiperf_runner.spec.proof import segment_seed

from .builder import build_module
from .data import DataSpec, TensorLoader, build_data
from .lrscale import CosineSchedule, LrScaling
from .precision import setup_precision
from .trainstate import digest, load_state, state_bytes
from .trial import MOMENTUM


def _tensors(data: bytes) -> dict[str, torch.Tensor]:
    from safetensors.torch import load

    return {k: v for k, v in load(data).items() if v.is_floating_point()}


def distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """L2 distance between two states over the floating tensors both hold (a missing one counts whole)."""
    total = 0.0
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        if x is None or y is None or x.shape != y.shape:
            total += float(((x if x is not None else y).double() ** 2).sum())  # type: ignore[union-attr]
            continue
        total += float(((x.double() - y.double()) ** 2).sum())
    return math.sqrt(total)


def replay_segment(trial_dir: Path, start: bytes, end: bytes | None, *, epoch: int, first: int, last: int,
                   steps: int, world: int, data: str | None = None, device_name: str = "cpu",
                   preset_name: str | None = None, tolerance: float = 0.0,
                   dataset: dict[str, Any] | None = None) -> dict[str, Any]:
    """The verdict on one segment: `passed` when the replayed state is END's (`exact`) or within
    `tolerance` of it (`ratio`). `dataset` replaces the preset's data set (tests of small data sets only:
    the service always re-executes on the preset's)."""
    trial = json.loads((trial_dir / "trial.json").read_text())
    hp = json.loads((trial_dir / "hparams.json").read_text())
    graph = Graph.from_json(json.loads((trial_dir / "graph.json").read_text()))
    preset = get_preset(preset_name or trial.get("preset") or "smoke")
    spec = DataSpec.audited(trial, dataset if dataset is not None else preset.dataset(data), data)
    device = torch.device(device_name)
    seed, batch = int(trial.get("seed", 0)), int(hp.get("batch_size", 32))
    out: dict[str, Any] = {"passed": False, "exact": False, "ratio": None, "error": None, "steps": last - first,
                           "images": 0}

    model = build_module(graph, num_classes=spec.num_classes, dropout=float(hp.get("dropout", 0.0)))
    channels_last = trial.get("channels_last") if trial.get("channels_last") is not None else True
    model.to(device).to(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    scaling = LrScaling.from_settings(trial.get("lr_scaling"), base_lr=float(hp.get("lr", 0.1)), batch_size=batch,
                                      world_size=world, epoch_budget=int(trial["epoch_budget"]))
    optimizer = torch.optim.SGD(model.parameters(), lr=scaling.peak_lr, momentum=MOMENTUM,
                                weight_decay=float(hp.get("weight_decay", 5e-4)))
    precision = setup_precision(str(trial.get("precision", "fp32")), device)
    scaler = precision.make_scaler()
    schedule = CosineSchedule.scaled(optimizer, scaling)
    try:
        load_state(start, model, optimizer, scaler)
    except ValueError as exc:
        out["error"] = f"start state: {exc}"
        return out
    criterion = nn.CrossEntropyLoss(label_smoothing=float(hp.get("label_smoothing", 0.0)))
    loaders = []
    for rank in range(world):
        d = build_data(spec, batch_size=batch, rank=rank, world_size=world, device=device, shuffle_seed=seed,
                       channels_last=channels_last, workers=0)
        d.train.set_epoch(epoch)
        loaders.append(d)
    if len(loaders[0].train) != steps:
        out["error"] = (f"the preset's data gives {len(loaders[0].train)} steps an epoch at batch {batch} on {world} "
                        f"rank(s); the log claims {steps}")
        return out
    t0 = time.perf_counter()
    out["images"] = _train_steps(model, optimizer, scaler, schedule, precision, criterion, loaders, seed, epoch,
                                 first, last, steps)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    replayed = state_bytes(model, optimizer, scaler)
    out["replayed"] = digest(replayed)
    out["exact"] = end is not None and digest(end) == out["replayed"]
    if end is not None:
        start_t, end_t, mine = _tensors(start), _tensors(end), _tensors(replayed)
        moved = distance(start_t, end_t)
        out["distance"], out["moved"] = distance(mine, end_t), moved
        # A segment whose committed states did not move (steps claimed, none trained) has no ratio: any move of
        # the re-execution is infinitely more than the segment's own (`still`; JSON holds no infinity).
        out["still"] = moved == 0
        out["ratio"] = out["distance"] / moved if moved > 0 else (0.0 if out["distance"] == 0 else None)
    out["passed"] = bool(out["exact"] or (out["ratio"] is not None and out["ratio"] <= tolerance))
    return out


class _Batches:
    """One rank's training batches by step number, as its loader yields them in the epoch set: an in-memory
    set's (augmented with the rank's generator, as the trial's loop does), or an ImageFolder's (each image
    augmented from its own seed, data.py `SeededImages`)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        if isinstance(loader, TensorLoader):
            self.order = torch.as_tensor(list(loader.sampler), dtype=torch.long, device=loader.images.device)
            self.size = loader.batch_size
        else:
            self.order = torch.as_tensor(list(loader.loader.sampler), dtype=torch.long)
            self.size = int(loader.loader.batch_size)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.order[step * self.size:(step + 1) * self.size]
        if isinstance(self.loader, TensorLoader):
            images = self.loader.images.index_select(0, b)
            if self.loader.augment is not None:
                images = self.loader.augment(images)
            return images, self.loader.labels.index_select(0, b)
        loader = self.loader.loader
        images, labels = loader.collate_fn([loader.dataset[int(j)] for j in b])  # the loader's own collation
        if self.loader.finish is not None:  # the `device` decoder's: decoded and cropped on the device
            images = self.loader.finish(images)
        return images, labels


def _train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: Any, schedule: CosineSchedule,
                 precision: Any, criterion: nn.Module, loaders: list[Any], seed: int, epoch: int, first: int,
                 last: int, steps: int) -> int:
    """Steps first+1..last of the epoch, every rank's batch in turn (train/trial.py's loop, data parallel)."""
    world = len(loaders)
    model.train()
    batches = [_Batches(d.train) for d in loaders]
    rng = []
    for rank in range(world):
        torch.manual_seed(segment_seed(seed, rank, epoch, first))
        rng.append(torch.get_rng_state())
    buffers = [b for b in model.buffers()]
    images_trained = 0
    for step in range(first, last):
        schedule.set(epoch - 1 + step / steps)
        optimizer.zero_grad(set_to_none=True)
        kept: list[torch.Tensor] | None = None
        for rank, d in enumerate(loaders):
            torch.set_rng_state(rng[rank])
            images, labels = batches[rank].batch(step)
            images, labels = d.normalizer(images), labels.to(d.normalizer.device)
            with precision.autocast():
                loss = criterion(model(images), labels)
            scaler.scale(loss / world).backward()
            rng[rank] = torch.get_rng_state()
            images_trained += int(labels.shape[0])
            if rank == 0:
                kept = [t.detach().clone() for t in buffers]  # rank 0's running statistics are the state's
            elif kept is not None:
                with torch.no_grad():
                    for t, v in zip(buffers, kept, strict=True):
                        t.copy_(v)
        scaler.step(optimizer)
        scaler.update()
    return images_trained


def replay_plan(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every segment of a plan, in one process (the service's audit: torch is imported once): {"segments":
    [{trial_dir, start_file, end_file, epoch, first, last, steps, world}], "preset", "data", "device",
    "tolerance"}. A segment that cannot run gives its error, and the others still run."""
    out = []
    default_threads = torch.get_num_threads()
    for seg in plan["segments"]:
        # As many threads as the trial's rank 0 ran: the same reductions, so on the same CPU the same bits.
        torch.set_num_threads(int(seg.get("threads") or 0) or default_threads)
        try:
            out.append(replay_segment(Path(seg["trial_dir"]), Path(seg["start_file"]).read_bytes(),
                                      Path(seg["end_file"]).read_bytes(), epoch=int(seg["epoch"]),
                                      first=int(seg["first"]), last=int(seg["last"]), steps=int(seg["steps"]),
                                      world=int(seg["world"]), data=plan.get("data"),
                                      device_name=plan.get("device") or "cpu", preset_name=plan.get("preset"),
                                      tolerance=float(plan.get("tolerance") or 0.0)))
        except Exception as exc:  # noqa: BLE001 - reported to the service as this segment's error
            out.append({"passed": False, "error": f"{type(exc).__name__}: {exc}"})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiperf_runner.train.segment",
                                     description="Re-execute one committed segment of a trial's training "
                                                 "(or, with --plan, every segment of a plan).")
    parser.add_argument("--plan", type=Path, default=None,
                        help="a JSON plan of segments (see replay_plan); prints {\"verdicts\": [...]}")
    parser.add_argument("trial_dir", type=Path, nargs="?")
    parser.add_argument("start", type=Path, nargs="?", help="the committed state the segment starts from")
    parser.add_argument("end", type=Path, nargs="?", help="the committed state it claims to end with")
    for name in ("epoch", "first", "last", "steps", "world"):
        parser.add_argument(f"--{name}", type=int)
    parser.add_argument("--data", default=None, help="the preset's data directory (smoke: none, generated)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", default=None, help="the result's preset (default: the trial's)")
    parser.add_argument("--tolerance", type=float, default=0.0,
                        help="the largest distance to END, relative to the segment's own move, that passes")
    args = parser.parse_args(argv)
    if args.plan is not None:
        print(json.dumps({"verdicts": replay_plan(json.loads(args.plan.read_text()))}))
        return 0
    if args.trial_dir is None or args.start is None or args.end is None or None in (
            args.epoch, args.first, args.last, args.steps, args.world):
        parser.error("give TRIAL_DIR START END and --epoch --first --last --steps --world, or --plan")
    try:
        result = replay_segment(args.trial_dir, args.start.read_bytes(), args.end.read_bytes(), epoch=args.epoch,
                                first=args.first, last=args.last, steps=args.steps, world=args.world, data=args.data,
                                device_name=args.device, preset_name=args.preset, tolerance=args.tolerance)
    except Exception as exc:  # noqa: BLE001 - reported to the service as the audit's error
        result = {"passed": False, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
