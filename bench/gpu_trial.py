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
    python bench/gpu_trial.py --data-path 5120  # also fed by a pack of JPEGs: the tensor and device decoders

With `--data-path IMAGES`, the runner's loop is also fed by the trial's own data path (`data_path`): a pack of
IMAGES ImageNet-sized JPEGs read by build_data's loader workers, with each of `--decoders` (tensor: decoded on
the CPUs; device: decoded on the GPU, train/devdecode.py), printed against the synthetic batch's images/s.

With `--workload llm`, the same two questions of AIPerf-LLM's trainer (train/llm/trainer.py): tokens/s
of a decoder-only transformer (default d_model 1024, 12 blocks of 16 heads x 64, SwiGLU MLP 2816,
seq_len 1024, byte-level vocab 256: 155M parameters), bf16 autocast on CUDA as the trainer fixes it,
on random bytes made once on the host (64 MiB; the trainer copies them to the device before its
clock starts, so data loading is out of the figures), --batch sequences per device per step:

  runner     `new_session` + `trainer.train(..., Budget(steps=steps))` after a `Budget(steps=warmup)`
             call, the figure being the trainer's own (its loop alone, ended by a device sync): windows
             drawn on the host from the rank's generator each step, per-step learning rate, AdamW with
             decay on the matrices only, gradient clipping, the loss summed on the device
  reference  the same model (`build_model`, same init) in a minimal loop: windows drawn on the device,
             autocast forward + cross-entropy, zero_grad, backward, clip_grad_norm_, AdamW step,
             fixed learning rate, no read-back

printed as tokens/s, the rules' FLOP/s (spec/llmflops.py `train_flops_per_token(arch).train` x
tokens/s), PaLM's 6N + attention model FLOP/s, and MFU = rules' FLOP/s / the device's bf16 dense peak
(spec/peaks.py by `torch.cuda.get_device_name()`; 'unknown peak' if the table lacks it; on a CPU, the
table's conservative fp32 estimate, the single-device runs then on one thread as each gloo rank). The
headline is runner / reference. Then DDP: one process per GPU (NCCL; on a CPU, 2 gloo processes), each calling `trainer.train` (which wraps the model in DDP itself
when the process group is up) on its own rank's windows, the global batch = --batch x seq_len x world;
total tokens/s against world size x the single-device runner figure.

    python bench/gpu_trial.py --workload llm           # a CUDA GPU: the 155M model, batch 16 x 1024, bf16
    python bench/gpu_trial.py --workload llm --tiny    # anywhere: d_model 64, 2 blocks, seq_len 64, fp32 CPU
    python bench/gpu_trial.py --workload llm --d-model 2048 --layers 16 --seq-len 2048 --batch 8

Without a CUDA GPU and without --tiny it says so and runs the tiny check. The whole script stops
itself after --timeout seconds (default 280), the DDP processes with it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
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
import torch.nn.functional as F
from aiperf_runner.spec.llmflops import LlmArch, LlmLayer, param_counts, train_flops_per_token
from aiperf_runner.spec.peaks import accelerator_peak, cpu_peak, lookup
from aiperf_runner.spec.seeds import resnet50, small_resnet
from aiperf_runner.train.builder import build_module
from aiperf_runner.train.distenv import DistEnv, free_port
from aiperf_runner.train.llm.model import build_model
from aiperf_runner.train.llm.trainer import Budget, LlmHparams, TrainResult, new_session, train
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
    return s.batch * s.steps / _timed(step, s.warmup, s.steps, device)


def _timed(step: Callable[[], None], warmup: int, steps: int, device: torch.device) -> float:
    """Seconds of `steps` calls of `step` after `warmup` untimed ones, the device drained on both sides."""
    for _ in range(warmup):
        step()
    _sync(device)
    t = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return time.perf_counter() - t


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


def _image_rank(rank: int, world: int, port: int, s: Settings, device: torch.device) -> dict[str, float]:
    precision = setup_precision(s.precision, device)
    torch.manual_seed(0)
    model = runner_model(s).to(device).to(memory_format=torch.channels_last)
    ddp = data_parallel(model, DistEnv(rank, world, rank, world, "127.0.0.1", port), device)
    dist.barrier()
    return {"images_per_s": runner_loop(ddp, s, device, precision)}


def _ddp_worker(rank: int, world: int, port: int, s: Settings | LlmSettings, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if s.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    dist.init_process_group("nccl" if s.device == "cuda" else "gloo", rank=rank, world_size=world)
    try:
        rank_figures = (_llm_rank if isinstance(s, LlmSettings) else _image_rank)(rank, world, port, s, device)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(rank_figures))
    finally:
        dist.destroy_process_group()
    # As the trial program does: torch.distributed's C++ threads can abort the interpreter's finalisation
    # (SIGABRT), which turns a finished rank into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def ddp(s: Settings | LlmSettings, world: int, out_dir: Path, key: str = "images_per_s") -> float:
    """Total images/s (`key`: tokens_per_s for the LLM) of `world` DDP processes (each times the same
    number of steps; the slowest rank's time stands for all, as every step waits for the all-reduce)."""
    mp.spawn(_ddp_worker, args=(world, free_port(), s, str(out_dir)), nprocs=world, join=True)
    rates = [json.loads((out_dir / f"rank{r}.json").read_text())[key] for r in range(world)]
    return world * min(rates)


# ---- --data-path: the runner's loop fed by the trial's own data path ----------------------------------

def data_path(s: Settings, decoders: list[str], images: int, tmp: Path) -> dict[str, float]:
    """Images/s of the runner's loop fed by build_data, per decoder: ImageNet-sized JPEGs (256 made here, each
    linked under several names: decoding costs the same), packed as `aiperf-runner stage` packs them, read by
    the loader's workers (the trial's default count) and, with `device`, decoded and cropped on the device;
    one epoch untimed (workers, CUDA, nvJPEG start), the next timed, the device drained at its end."""
    from aiperf_runner.data import shards
    from aiperf_runner.train.data import DataError, DataSpec, build_data
    from aiperf_runner.train.preflight import make_jpegs

    (tmp / "jpegs").mkdir()
    made = make_jpegs(tmp / "jpegs", min(images, 256))
    for split, count in (("train", max(images, s.classes)), ("val", s.classes)):  # every class in both splits
        for i in range(count):
            folder = tmp / "tree" / split / f"c{i % s.classes:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            os.link(made[i % len(made)], folder / f"{i}.jpg")
    digest = shards.pack(tmp / "tree", tmp / "pack").manifest["digest"]
    device = torch.device("cuda:0" if s.device == "cuda" else "cpu")
    precision = setup_precision(s.precision, device)
    out: dict[str, float] = {}
    for decoder in decoders:
        spec = DataSpec("imagenet", s.classes, s.image_size, root=str(tmp / "pack"), decoder=decoder, packed=digest)
        try:
            data = build_data(spec, batch_size=s.batch, device=device, shuffle_seed=0, channels_last=True)
        except DataError as exc:  # the device decoder's tolerance check on a GPU: print it, go on
            print(f"  fed by the data path, {decoder}: refused: {exc}", flush=True)
            continue
        torch.manual_seed(0)
        model = runner_model(s).to(device).to(memory_format=torch.channels_last)
        optimizer, criterion = _sgd(model), nn.CrossEntropyLoss(label_smoothing=0.1)
        schedule, scaler = CosineSchedule(optimizer, 0.1, 3), precision.make_scaler()
        train_one_epoch(model, criterion, optimizer, data, precision, scaler, schedule, 0, device)
        _sync(device)
        t = time.perf_counter()
        totals = train_one_epoch(model, criterion, optimizer, data, precision, scaler, schedule, 1, device)
        float(totals.loss_sum)
        _sync(device)
        out[decoder] = totals.samples / (time.perf_counter() - t)
        del model, data
    return out


# ---- AIPerf-LLM ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LlmSettings:
    d_model: int
    layers: int
    head_dim: int
    mlp_hidden: int
    seq_len: int
    vocab: int
    batch: int  # sequences per device per step
    steps: int
    warmup: int
    data_mib: int
    device: str  # "cuda" (bf16 autocast, as the trainer fixes it) or "cpu" (fp32)

    def arch(self) -> LlmArch:
        layer = LlmLayer(self.d_model // self.head_dim, self.head_dim, self.mlp_hidden)
        return LlmArch(self.vocab, self.d_model, self.seq_len, (layer,) * self.layers)

    def hparams(self, world: int = 1) -> LlmHparams:
        """The trainer's defaults; `batch_tokens` is global: --batch sequences on each of `world` ranks."""
        return LlmHparams(batch_tokens=self.batch * self.seq_len * world)


def _random_bytes(mib: int, seed: int = 0) -> bytes:
    """The training bytes, made once on the host; the same on every rank (the ranks' windows differ)."""
    return random.Random(seed).randbytes(mib << 20)


def _llm_autocast(device: torch.device) -> contextlib.AbstractContextManager[object]:
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def llm_runner(s: LlmSettings, device: torch.device, data: bytes, world: int = 1) -> TrainResult:
    """The trainer's own timing of `steps` steps, after a `warmup`-step call (same session: the
    optimizer's state, the allocator and the kernels are warm). Under DDP each call wraps the model anew."""
    hp = s.hparams(world)
    session = new_session(s.arch(), hp, seed=0, device=device)
    if s.warmup > 0:
        train(session, data, hp, Budget(steps=s.warmup), seed=1, device=device)
    _sync(device)
    return train(session, data, hp, Budget(steps=s.steps), seed=2, device=device)


def llm_reference(s: LlmSettings, device: torch.device, data: bytes) -> float:
    """Tokens/s of the same model in a minimal loop (windows drawn on the device, no per-step read-back)."""
    arch, hp = s.arch(), s.hparams()
    model = build_model(arch, generator=torch.Generator().manual_seed(0)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp.lr, betas=hp.betas, weight_decay=hp.weight_decay)
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    offsets = torch.arange(arch.seq_len + 1, device=device)[None, :]

    def step() -> None:
        starts = torch.randint(0, buf.numel() - arch.seq_len, (s.batch, 1), device=device)
        window = buf[starts + offsets].long()
        with _llm_autocast(device):
            logits = model(window[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, arch.vocab), window[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), hp.grad_clip)
        optimizer.step()

    model.train()
    return s.batch * arch.seq_len * s.steps / _timed(step, s.warmup, s.steps, device)


def llm_single_device(s: LlmSettings) -> tuple[dict[str, float], TrainResult]:
    """On a CPU, one thread, as each DDP rank has: world x this is then the linear figure (and the tiny
    model gains nothing from more, while spinning OpenMP threads on a busy machine lose a lot)."""
    device = torch.device("cuda:0" if s.device == "cuda" else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)
    data = _random_bytes(s.data_mib)
    torch.manual_seed(0)
    result = llm_runner(s, device, data)
    out = {"runner": result.tokens_per_s}
    if device.type == "cuda":
        torch.cuda.empty_cache()
    torch.manual_seed(0)
    out["reference"] = llm_reference(s, device, data)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out, result


def _llm_rank(rank: int, world: int, port: int, s: LlmSettings, device: torch.device) -> dict[str, float]:
    data = _random_bytes(s.data_mib)
    torch.manual_seed(0)
    dist.barrier()
    result = llm_runner(s, device, data, world)
    # train_tokens is summed over the ranks, which all take the same steps: this rank's share over its clock
    return {"tokens_per_s": result.train_tokens / world / result.seconds}


def _llm_peak(s: LlmSettings) -> tuple[float | None, str]:
    """Dense peak FLOP/s of one device at the precision the trainer uses, and what it is."""
    if s.device == "cuda":
        name = torch.cuda.get_device_name(0)
        peak = accelerator_peak(name, "bf16")
        if peak is None:
            return None, f"unknown peak ({name!r} is not in spec/peaks.py)"
        acc = lookup(name)
        assert acc is not None
        return peak, f"{acc.name} bf16 {peak / 1e12:.1f} TFLOP/s"
    threads = torch.get_num_threads()
    peak = cpu_peak(threads, precision="fp32")
    return peak, f"CPU estimate fp32, {threads} thread(s), {peak / 1e9:.0f} GFLOP/s"


def _flops(x: float) -> str:
    return f"{x / 1e12:7.2f} TFLOP/s" if x >= 1e11 else f"{x / 1e9:7.3f} GFLOP/s"


def llm_settings(args: argparse.Namespace) -> LlmSettings:
    cuda = torch.cuda.is_available()
    if not cuda and not args.tiny:
        print("no CUDA GPU here: running the tiny CPU check instead (--tiny)", flush=True)
        args.tiny = True
    tiny = args.tiny
    d_model = args.d_model or (64 if tiny else 1024)
    head_dim = args.head_dim or (16 if tiny else 64)
    if d_model % head_dim:
        raise SystemExit(f"--d-model {d_model} is not a multiple of --head-dim {head_dim}")
    mlp = args.mlp_hidden or -(-11 * d_model // 4 // 64) * 64  # 2.75 d_model, up to a multiple of 64
    return LlmSettings(d_model=d_model, layers=args.layers or (2 if tiny else 12), head_dim=head_dim,
                       mlp_hidden=mlp, seq_len=args.seq_len or (64 if tiny else 1024), vocab=256,
                       batch=args.batch or (4 if tiny else 16), steps=args.steps or (10 if tiny else 30),
                       warmup=args.warmup if args.warmup is not None else (2 if tiny else 10),
                       data_mib=args.data_mib or (1 if tiny else 64), device="cpu" if tiny or not cuda else "cuda")


def measure_llm(args: argparse.Namespace) -> dict[str, Any]:
    s = llm_settings(args)
    arch = s.arch()
    per_token = train_flops_per_token(arch)
    if s.device == "cpu":
        torch.set_num_threads(1)  # as llm_single_device runs
    peak, peak_text = _llm_peak(s)
    where = torch.cuda.get_device_name(0) if s.device == "cuda" else f"CPU ({torch.get_num_threads()} thread)"
    layer = arch.layers[0]
    print(f"AIPerf-LLM decoder: d_model {arch.d_model}, {len(arch.layers)} blocks of {layer.heads} heads x "
          f"{layer.head_dim}, MLP {layer.mlp_hidden}, seq_len {arch.seq_len}, vocab {arch.vocab}, "
          f"{param_counts(arch).total / 1e6:.1f}M parameters; batch {s.batch} x {s.seq_len} tokens per device, "
          f"{'bf16 autocast' if s.device == 'cuda' else 'fp32'}, {s.steps} timed steps after {s.warmup}, "
          f"{s.data_mib} MiB of random bytes, on {where}", flush=True)
    print(f"  per token: rules {per_token.train / 1e9:.4f} GFLOP, PaLM {per_token.palm / 1e9:.4f} GFLOP; "
          f"peak: {peak_text}", flush=True)
    single, result = llm_single_device(s)
    figures: dict[str, Any] = {
        "workload": "llm", "settings": s.__dict__, "arch": arch.to_dict(), "flops_per_token": per_token.to_json(),
        "peak_flops": peak, "peak": peak_text, "single": single,
        "runner_trainer_flops_per_s": result.flops_per_s, "runner_train_loss": result.train_loss}
    rows = {}
    for name, rate in single.items():
        rules, palm = per_token.train * rate, per_token.palm * rate
        mfu = rules / peak if peak else None
        rows[name] = {"tokens_per_s": rate, "rules_flops_per_s": rules, "palm_flops_per_s": palm, "mfu": mfu}
        print(f"  {name:<10} {rate:12.1f} tokens/s   rules {_flops(rules)}   PaLM {_flops(palm)}   MFU "
              + (f"{mfu:6.1%}" if mfu is not None else "unknown peak"), flush=True)
    figures["rows"] = rows
    figures["ratio"] = single["runner"] / single["reference"]
    print(f"runner / reference: {figures['ratio']:.3f}   (trainer's own count: {_flops(result.flops_per_s)}, "
          f"train loss {result.train_loss:.3f} nats)", flush=True)
    world = args.ddp_procs if args.ddp_procs is not None else (torch.cuda.device_count() if s.device == "cuda" else 2)
    if world >= 1:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="aiperf-gpu-trial-") as tmp:
            total = ddp(s, world, Path(tmp), key="tokens_per_s")
        linear = world * single["runner"]
        rules = per_token.train * total
        mfu = rules / (world * peak) if peak else None
        figures["ddp"] = {"world": world, "tokens_per_s": total, "linear": linear, "efficiency": total / linear,
                          "rules_flops_per_s": rules, "mfu": mfu}
        print(f"DDP x{world}: {total:.1f} tokens/s against linear {linear:.1f}: {total / linear:.1%} of linear; "
              f"rules {_flops(rules).strip()}, MFU " + (f"{mfu:.1%}" if mfu is not None else "unknown peak"))
    return figures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", choices=("image", "llm"), default="image",
                   help="image: the ResNet-50 seed trial (default); llm: AIPerf-LLM's trainer")
    p.add_argument("--tiny", action="store_true",
                   help="the small smoke seed instead of ResNet-50, 16x16 images, batch 8, 10 steps, on the CPU, fp32 "
                        "unless --precision (llm: d_model 64, 2 blocks, seq_len 64, batch 4, fp32): a smoke check "
                        "of this script, its figures mean nothing")
    p.add_argument("--batch", type=int, help="images per device per step (default 256; tiny 8); "
                                             "llm: sequences per device per step (default 16; tiny 4)")
    p.add_argument("--steps", type=int, help="timed steps (default 30; tiny 10)")
    p.add_argument("--warmup", type=int, help="untimed steps first (default 10; tiny 2)")
    p.add_argument("--image-size", type=int, help="default 224; tiny 16")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16", "fp16"), help="default bf16; tiny fp32 "
                   "(image only: the LLM trainer fixes bf16 autocast on CUDA, fp32 on a CPU)")
    llm = p.add_argument_group("--workload llm")
    llm.add_argument("--d-model", type=int, help="default 1024; tiny 64")
    llm.add_argument("--layers", type=int, help="blocks (default 12; tiny 2)")
    llm.add_argument("--head-dim", type=int, help="heads = d_model / head_dim (default 64; tiny 16)")
    llm.add_argument("--mlp-hidden", type=int, help="SwiGLU width (default 2.75 x d_model up to a multiple of 64)")
    llm.add_argument("--seq-len", type=int, help="default 1024; tiny 64")
    llm.add_argument("--data-mib", type=int, help="MiB of random training bytes (default 64; tiny 1)")
    p.add_argument("--ddp-procs", type=int, help="DDP processes (default: every GPU; on a CPU 2); 0 skips DDP")
    p.add_argument("--data-path", type=int, metavar="IMAGES", help="image: also the runner's loop fed by the trial's "
                   "data path (a pack of IMAGES ImageNet-sized JPEGs, loader workers) with each --decoders")
    p.add_argument("--decoders", default="tensor,device", help="--data-path: decoders to feed it with "
                   "(default tensor,device)")
    p.add_argument("--timeout", type=float, default=280.0, help="stop everything after this many seconds")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    if args.workload == "llm":
        if args.precision or args.image_size:
            p.error("--precision and --image-size are the image workload's (the LLM trainer fixes its precision)")
    elif any(getattr(args, x) is not None for x in ("d_model", "layers", "head_dim", "mlp_hidden", "seq_len",
                                                      "data_mib")):
        p.error("--d-model, --layers, --head-dim, --mlp-hidden, --seq-len and --data-mib need --workload llm")
    if args.workload == "llm" and args.data_path:
        p.error("--data-path is the image workload's")
    return args


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
    if args.workload == "llm":
        return measure_llm(args)
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
    if args.data_path:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="aiperf-gpu-trial-") as tmp:
            fed = data_path(s, args.decoders.split(","), args.data_path, Path(tmp))
        figures["data_path"] = fed
        for decoder, rate in fed.items():
            print(f"  fed by the data path, {decoder:<7} {rate:10.1f} images/s: "
                  f"{rate / one['runner']:.1%} of the synthetic batch's", flush=True)
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
