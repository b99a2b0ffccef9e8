"""Training one AIPerf-LLM trial: AdamW on random byte windows, data-parallel, tokens and FLOPs counted.

`train(session, data, hparams, budget, ...)` trains `session.model` (and its optimizer, kept in the
session so that a grown model continues with its parent's moments: `grow`) for a budget of steps or
seconds:

- **batches**: each step, every rank draws its own `seq_len + 1`-byte windows at random positions of the
  training bytes (input = the first seq_len, target = the last seq_len), from a generator seeded by
  (seed, rank): the ranks see different windows and a rerun sees the same ones. `batch_tokens` is the
  global batch: seq_len x sequences per rank x ranks. Token shards (data/llmshards.py, the shard presets)
  come as a `TokenWindows` instead of bytes: the same generator draws window numbers, the shards' memory maps
  give the windows (a corpus of one shard gives the windows its bytes would).
- **data parallel**: when `torch.distributed` is initialised with more than one rank, the model is
  wrapped in DDP (gloo on CPU, NCCL on CUDA); a time budget is decided by rank 0 and broadcast each step
  with the schedule's progress, so every rank takes the same steps at the same learning rate.
- **schedule**: linear warm-up over `warmup_steps`, then cosine from `lr` to `lr * min_lr_ratio`. A call
  covers the part `span` of one cosine (progress by steps or by time), so a run split by growths follows
  one decay, with a fresh warm-up after each growth (where carried moments meet new weights).
- **precision**: bf16 autocast on CUDA, fp32 on CPU; the loss is computed in fp32.
- **counting**: trained tokens are the targets of every window (all real: no padding), summed over ranks;
  FLOPs are `spec.llmflops.train_flops(arch, lengths)` of those windows, the rules' count.
- **validation** (`evaluate`): the frozen evaluation. The whole validation text (bytes, or a shard preset's
  validation tokens as an array) in non-overlapping windows, in order (window i: inputs val[iT : iT+T],
  targets val[iT+1 : iT+T+1]; the last window may be shorter), every byte but the first a target exactly
  once; the loss is the mean over those targets, in nats. Windows are shared round-robin between ranks and
  the sums added, so the figure does not depend on the number of ranks (up to float rounding).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from aiperf_runner.spec.llmflops import LlmArch, train_flops

from .model import LlmModel, build_model
from .morph import Growth, carry_optimizer_state

__all__ = ["Budget", "LlmHparams", "Session", "TrainResult", "evaluate", "grow", "make_optimizer", "new_session",
           "train", "train_as_ranks"]


@dataclass(frozen=True)
class LlmHparams:
    """A trial's hyper-parameters; `batch_tokens` is the global batch (all ranks) in tokens."""

    lr: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.1
    batch_tokens: int = 4096
    min_lr_ratio: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0


@dataclass(frozen=True)
class Budget:
    """Train for `steps` steps or `seconds` of wall time (rank 0's clock), whichever is given."""

    steps: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if (self.steps is None) == (self.seconds is None):
            raise ValueError("give exactly one of steps and seconds")


@dataclass
class Session:
    """A model being trained and its optimizer; `steps` counts the steps taken since it was created,
    over growths too."""

    model: LlmModel
    optimizer: torch.optim.AdamW
    steps: int = 0
    growths: list[str] = field(default_factory=list)

    @property
    def arch(self) -> LlmArch:
        return self.model.arch


@dataclass(frozen=True)
class TrainResult:
    """What a call to `train` did. `seconds`: the training loop alone (evaluation not included)."""

    steps: int
    train_tokens: int
    flops: int
    seconds: float
    train_loss: float
    val_loss: float | None
    eval_seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.train_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds if self.seconds > 0 else 0.0


# ---- model and optimizer --------------------------------------------------------------------------

def make_optimizer(model: nn.Module, hp: LlmHparams) -> torch.optim.AdamW:
    """AdamW; weight decay on the matrices (and the embedding) only, not on the norms' gains."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=hp.lr, betas=hp.betas)


def new_session(arch: LlmArch, hp: LlmHparams, *, seed: int, device: torch.device | str = "cpu") -> Session:
    """The seed model of `arch`, initialised from `seed` (the same weights on every rank), and its AdamW."""
    model = build_model(arch, generator=torch.Generator().manual_seed(seed)).to(device)
    return Session(model, make_optimizer(model, hp))


def grow(session: Session, growth: Growth, hp: LlmHparams) -> Session:
    """The session continued on a grown model: a new AdamW holding the old one's moments on inherited
    weights (morph.carry_optimizer_state). The growth must have been made from `session.model`."""
    optimizer = make_optimizer(growth.model, hp)
    carry_optimizer_state(session.model, growth.model, session.optimizer, optimizer, growth.mapping)
    return Session(growth.model, optimizer, session.steps, [*session.growths, growth.kind])


# ---- data -----------------------------------------------------------------------------------------

def byte_tensor(data: bytes, device: torch.device | str = "cpu") -> torch.Tensor:
    """The bytes as a uint8 tensor (a copy: torch.frombuffer wants a writable buffer)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)


class TokenWindows(Protocol):
    """Training tokens too large for memory (data/llmshards.py TokenShards): numbered windows of seq_len + 1."""

    def window_count(self, seq_len: int) -> int: ...

    def windows(self, index: np.ndarray, seq_len: int) -> np.ndarray: ...


def token_tensor(data: bytes | np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
    """Bytes as `byte_tensor` makes them; an array of tokens as int32 (its windows are made int64 when read)."""
    if isinstance(data, (bytes, bytearray)):
        return byte_tensor(data, device)
    return torch.from_numpy(np.ascontiguousarray(data, dtype=np.int32)).to(device)


def rank_generator(seed: int, rank: int) -> torch.Generator:
    """A generator of this rank's windows: different ranks, different streams; the same on a rerun."""
    digest = hashlib.sha256(f"aiperf-llm-windows/{seed}/{rank}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def random_windows(buf: torch.Tensor, seq_len: int, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` windows of `seq_len + 1` bytes at random starts: (inputs, targets), int64 (n, seq_len) each."""
    starts = torch.randint(0, buf.numel() - seq_len, (n,), generator=gen)
    if buf.is_cuda:  # a pageable copy would wait for the device's queue every step: pinned, asynchronous
        starts = starts.pin_memory().to(buf.device, non_blocking=True)
    idx = starts[:, None] + torch.arange(seq_len + 1, device=buf.device)[None, :]
    w = buf[idx].long()
    return w[:, :-1], w[:, 1:]


def token_windows(source: TokenWindows, seq_len: int, n: int, gen: torch.Generator,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` windows of `source` at random numbers drawn as `random_windows` draws its starts: (inputs, targets)."""
    index = torch.randint(0, source.window_count(seq_len), (n,), generator=gen)
    w = torch.from_numpy(source.windows(index.numpy(), seq_len))
    if device.type == "cuda":
        w = w.pin_memory().to(device, non_blocking=True)
    return w[:, :-1], w[:, 1:]


def training_source(data: bytes | TokenWindows, device: torch.device) -> torch.Tensor | TokenWindows:
    """What the windows are cut from: the training bytes as a tensor on `device`, or the shards as they are."""
    return byte_tensor(data, device) if isinstance(data, (bytes, bytearray)) else data


def window_drawer(source: torch.Tensor | TokenWindows, seq_len: int, n: int, gen: torch.Generator,
                  device: torch.device) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    """A rank's draw of its `n` windows per step from `source` (`training_source`), numbered by `gen`."""
    if isinstance(source, torch.Tensor):
        return functools.partial(random_windows, source, seq_len, n, gen)
    return functools.partial(token_windows, source, seq_len, n, gen, device)


def eval_windows(n_bytes: int, seq_len: int) -> list[tuple[int, int]]:
    """The frozen evaluation's windows as (start, targets): non-overlapping, in order, covering every
    byte but the first as a target exactly once."""
    return [(s, min(seq_len, n_bytes - 1 - s)) for s in range(0, n_bytes - 1, seq_len)]


# ---- distributed helpers --------------------------------------------------------------------------

def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _all_sum(t: torch.Tensor) -> torch.Tensor:
    if _world()[1] > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def _autocast(device: torch.device) -> contextlib.AbstractContextManager[object]:
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ---- schedule -------------------------------------------------------------------------------------

def lr_at(hp: LlmHparams, step: int, progress: float, span: tuple[float, float]) -> float:
    """Warm-up over this call's first `warmup_steps` steps, times the cosine at `progress` of this call,
    placed in `span` of the whole decay."""
    p = span[0] + (span[1] - span[0]) * min(max(progress, 0.0), 1.0)
    cosine = hp.min_lr_ratio + (1 - hp.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p))
    warm = min(1.0, (step + 1) / hp.warmup_steps) if hp.warmup_steps > 0 else 1.0
    return hp.lr * cosine * warm


def _progress(budget: Budget, step: int, start: float, device: torch.device) -> tuple[float, bool]:
    """(progress of this call, whether to stop before this step): by steps, or by rank 0's clock, broadcast."""
    if budget.steps is not None:
        return step / budget.steps, step >= budget.steps
    assert budget.seconds is not None
    progress = (time.perf_counter() - start) / budget.seconds
    if _world()[1] > 1:  # every rank must take the same decision and the same learning rate
        t = torch.tensor([progress], dtype=torch.float64, device=device)
        dist.broadcast(t, src=0)
        progress = float(t.item())
    return progress, progress >= 1.0


# ---- training -------------------------------------------------------------------------------------

def _local_sequences(hp: LlmHparams, seq_len: int, world: int) -> int:
    n, rest = divmod(hp.batch_tokens, seq_len * world)
    if n < 1 or rest:
        raise ValueError(f"batch_tokens {hp.batch_tokens} is not a positive multiple of seq_len {seq_len} "
                         f"x {world} rank(s)")
    return n


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The mean cross-entropy of a batch of windows (the forward under the device's autocast, the loss in fp32)."""
    with _autocast(device):
        logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


def _step(model: nn.Module, session: Session, x: torch.Tensor, y: torch.Tensor, hp: LlmHparams,
          device: torch.device) -> torch.Tensor:
    loss = _loss(model, x, y, device)
    session.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if hp.grad_clip > 0:
        nn.utils.clip_grad_norm_(session.model.parameters(), hp.grad_clip)
    session.optimizer.step()
    return loss.detach()


def train(session: Session, data: bytes | TokenWindows, hp: LlmHparams, budget: Budget, *, seed: int,
          device: torch.device | str = "cpu", val: bytes | np.ndarray | None = None,
          span: tuple[float, float] = (0.0, 1.0)) -> TrainResult:
    """Train `session` for `budget` on `data` (see the module docstring); evaluate on `val` if given.

    `seed` seeds the windows (with the rank): give each call of a run its own, or the windows repeat.
    """
    device = torch.device(device)
    rank, world = _world()
    arch = session.arch
    n_local = _local_sequences(hp, arch.seq_len, world)
    flops_per_step = train_flops(arch, [arch.seq_len] * n_local)  # every target is a real token
    draw = window_drawer(training_source(data, device), arch.seq_len, n_local, rank_generator(seed, rank), device)
    model: nn.Module = session.model
    if world > 1:  # DDP broadcasts rank 0's weights at construction: a grown model starts equal everywhere
        model = nn.parallel.DistributedDataParallel(session.model)
    session.model.train()
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    steps, start = 0, time.perf_counter()
    while True:
        progress, stop = _progress(budget, steps, start, device)
        if stop:
            break
        for group in session.optimizer.param_groups:
            group["lr"] = lr_at(hp, steps, progress, span)
        x, y = draw()
        loss_sum += _step(model, session, x, y, hp, device)
        steps += 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    session.steps += steps
    totals = _all_sum(torch.tensor([steps * n_local * arch.seq_len, steps * flops_per_step],
                                       dtype=torch.float64, device=device))
    train_loss = float(_all_sum(loss_sum.clone()).item()) / max(steps * world, 1)
    val_loss, eval_seconds = None, 0.0
    if val is not None:
        t0 = time.perf_counter()
        val_loss = evaluate(session.model, val, device=device)
        eval_seconds = time.perf_counter() - t0
    # token and FLOP totals are integers; float64 holds them exactly below 2^53
    return TrainResult(steps, int(totals[0].item()), int(totals[1].item()), seconds, train_loss, val_loss,
                       eval_seconds)


def train_as_ranks(session: Session, data: bytes | TokenWindows, hp: LlmHparams, steps: int, *, seed: int,
                   world: int, device: torch.device | str = "cpu", limit: int | None = None) -> float:
    """Train `session` for `steps` steps as `train` does on `world` data-parallel ranks, in this one process:
    each step, every rank's windows from its own generator (`rank_generator(seed, rank)`), its gradient
    computed alone, multiplied by 1 / world and the ranks' products summed in rank order (DDP's reducer scales
    each rank's gradient by 1 / world and the allreduce sums them: with 2 ranks the same floats as gloo), then
    clipped and stepped as `train` does, at the learning rate of a budget of `steps` steps. What the audit's
    re-execution trains (train/llm/reexecute.py). `limit`: stop after that many of the `steps` steps (a trial
    cut short, bench/llm_reexecute_tolerance.py's forgery). Returns the seconds it took."""
    device = torch.device(device)
    if _world()[1] > 1:
        raise RuntimeError("train_as_ranks emulates the ranks in one process: call it outside a process group")
    arch = session.arch
    n_local = _local_sequences(hp, arch.seq_len, world)
    source = training_source(data, device)
    draws = [window_drawer(source, arch.seq_len, n_local, rank_generator(seed, rank), device)
             for rank in range(world)]
    params = [p for p in session.model.parameters() if p.requires_grad]
    session.model.train()
    start = time.perf_counter()
    taken = steps if limit is None else min(limit, steps)
    for step in range(taken):
        for group in session.optimizer.param_groups:
            group["lr"] = lr_at(hp, step, step / steps, (0.0, 1.0))
        summed: list[torch.Tensor] | None = None
        for draw in draws:
            x, y = draw()
            session.optimizer.zero_grad(set_to_none=True)
            _loss(session.model, x, y, device).backward()
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            if world > 1:
                grads = [g * (1.0 / world) for g in grads]
            summed = grads if summed is None else [a + b for a, b in zip(summed, grads, strict=True)]
        assert summed is not None
        for p, g in zip(params, summed, strict=True):
            p.grad = g
        if hp.grad_clip > 0:
            nn.utils.clip_grad_norm_(session.model.parameters(), hp.grad_clip)
        session.optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    session.steps += taken
    return time.perf_counter() - start


# ---- the frozen evaluation ------------------------------------------------------------------------

def _batches(windows: list[tuple[int, int]], size: int) -> Iterator[list[tuple[int, int]]]:
    for i in range(0, len(windows), size):
        yield windows[i:i + size]


@torch.no_grad()
def evaluate(model: LlmModel, val: bytes | np.ndarray, *, device: torch.device | str = "cpu",
             batch: int = 64) -> float:
    """Mean loss (nats per target byte, or token) over the frozen evaluation's windows (`eval_windows`)."""
    device = torch.device(device)
    rank, world = _world()
    seq_len = model.arch.seq_len
    buf = token_tensor(val, device)
    mine = eval_windows(len(val), seq_len)[rank::world]
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, targets
    was_training = model.training
    model.eval()
    try:
        for part in _batches(mine, batch):
            for length in sorted({n for _, n in part}):  # full windows together; the short last one alone
                starts = torch.tensor([s for s, n in part if n == length], device=device)
                idx = starts[:, None] + torch.arange(length + 1, device=device)[None, :]
                w = buf[idx].long()
                with _autocast(device):
                    logits = model(w[:, :-1])
                totals[0] += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                             reduction="sum").double()
                totals[1] += w[:, 1:].numel()
    finally:
        model.train(was_training)
    _all_sum(totals)
    return float(totals[0] / totals[1])
