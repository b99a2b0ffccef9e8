"""The process group of a trial's ranks and their data parallelism: how the ranks meet (a store
on a socket the parent already listens on, for ranks it forked), the collectives the trial loop
uses (sums, an integer from rank 0, rank 0's buffers), and the DDP wrapper with its gradient
allreduce (NCCL on CUDA, gloo between nodes, shared memory between one machine's CPU processes:
shmreduce.py).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from . import shmreduce
from .distenv import DistEnv


def init_process_group(denv: DistEnv, device: torch.device) -> None:
    if denv.world_size <= 1:
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs: dict[str, Any] = {}
    if device.type == "cuda":
        kwargs["device_id"] = device
    if denv.listen_fd is not None:  # forked ranks: rank 0 serves the store on the parent's socket
        from torch.distributed.constants import default_pg_timeout

        kwargs["store"] = dist.TCPStore(denv.master_addr, denv.master_port, denv.world_size, denv.rank == 0,
                                        default_pg_timeout, wait_for_workers=False,
                                        master_listen_fd=denv.listen_fd if denv.rank == 0 else None)
    else:
        kwargs["init_method"] = f"tcp://{denv.master_addr}:{denv.master_port}"
    dist.init_process_group(backend, rank=denv.rank, world_size=denv.world_size, **kwargs)


def all_sum(t: torch.Tensor, denv: DistEnv) -> torch.Tensor:
    if denv.world_size > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def broadcast_int(value: int, denv: DistEnv, device: torch.device) -> int:
    if denv.world_size <= 1:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.broadcast(t, src=0)
    return int(t.item())


def data_parallel(model: nn.Module, denv: DistEnv, device: torch.device) -> nn.Module:
    """DDP over the trial's ranks. Buffers (BatchNorm's running statistics) are not broadcast
    before every forward: training uses the batch's statistics, and rank 0's running ones are
    broadcast once per epoch, before evaluation (`sync_buffers`), which is all they are used for;
    the per-step broadcast was one more collective in every step. On one machine's CPUs the
    gradients meet in shared memory (shmreduce.py), not through gloo, in one bucket: each bucket
    is a rendezvous of the ranks, and with the cores all computing there is nothing to overlap."""
    options: dict[str, Any] = ({"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(
        nn.parallel.DistributedDataParallel.__init__).parameters else {"broadcast_buffers": False})
    shared_memory = shmreduce.applies(denv, device)
    if shared_memory:
        options["bucket_cap_mb"] = shmreduce.ONE_BUCKET_MB
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True, **options)
    if shared_memory and shmreduce.install(ddp, denv, device) is not None:
        print(f"rank {denv.rank}: gradients allreduced through shared memory", flush=True)
    return ddp


def sync_buffers(model: nn.Module) -> None:
    """Rank 0's buffers to every rank, one broadcast per dtype (not one per buffer: a collective
    costs about a millisecond on CPU whatever its size, and a network has a hundred buffers)."""
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for buf in model.buffers():
        by_dtype.setdefault(buf.dtype, []).append(buf)
    for bufs in by_dtype.values():
        flat = torch.cat([b.reshape(-1) for b in bufs])
        dist.broadcast(flat, src=0)
        offset = 0
        for b in bufs:
            b.copy_(flat[offset:offset + b.numel()].view_as(b))
            offset += b.numel()
