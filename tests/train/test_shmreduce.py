"""The shared-memory gradient allreduce of CPU trials (train/shmreduce.py): the sums gloo gives,
the same on every rank, call after call with ranks arriving late; DDP with it trains as DDP with
gloo; it applies only where it is sound; a peer that never comes is an error, not a hang."""

from __future__ import annotations

import mmap
import os
import random
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from aiperf_runner.spec.seeds import small_resnet
from aiperf_runner.train import shmreduce
from aiperf_runner.train.builder import build_module
from aiperf_runner.train.distenv import DistEnv, free_port
from aiperf_runner.train.parallel import data_parallel
from aiperf_runner.train.shmreduce import ShmAllreduce
from torch import nn


def _allreduce_worker(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        reducer = ShmAllreduce.for_group(rank, world, 8 * 3000)
        rng = random.Random(rank)
        mismatches = []
        for call in range(60):
            dtype = torch.float64 if call % 3 == 0 else torch.float32
            n = 1 + (call * 997) % 3000
            gen = torch.Generator().manual_seed(call * 100 + rank)
            mine = torch.randn(n, generator=gen, dtype=dtype)
            if rng.random() < 0.3:
                time.sleep(rng.random() * 0.02)  # a late rank: the others wait for it
            expected = mine.clone()
            dist.all_reduce(expected)
            got = reducer.allreduce_(mine.clone())
            if not torch.allclose(got, expected, rtol=1e-6, atol=1e-6):
                mismatches.append(call)
            everyone = [torch.empty_like(got) for _ in range(world)]
            dist.all_gather(everyone, got)
            if any(not torch.equal(e, got) for e in everyone):
                mismatches.append(f"{call}: ranks differ")
        torch.save({"mismatches": mismatches, "ddp": _ddp_step(rank, world)}, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
    os._exit(0)


def _ddp_step(rank: int, world: int) -> dict[str, dict[str, torch.Tensor]]:
    """Three SGD steps of a small ResNet under DDP, with the trial's hook and with plain gloo."""
    weights = {}
    denv = DistEnv(rank, world, rank, world, "127.0.0.1", 0, "spawn")
    for mode in ("1", "0"):
        os.environ[shmreduce.ENV] = mode
        torch.manual_seed(0)
        model = build_module(small_resnet(10, 16, width=8))
        ddp = data_parallel(model, denv, torch.device("cpu"))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        gen = torch.Generator().manual_seed(rank)
        for _ in range(3):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(ddp(torch.randn(4, 3, 16, 16, generator=gen)),
                                               torch.randint(0, 10, (4,), generator=gen))
            loss.backward()
            optimizer.step()
        # Parameters; buffers (BatchNorm's running statistics) are each rank's own until the trial
        # broadcasts rank 0's before evaluating, so they are compared rank by rank.
        weights[mode] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return weights


@pytest.mark.slow
@pytest.mark.skipif(not shmreduce.applies(DistEnv(0, 2, 0, 2), torch.device("cpu")),
                    reason="the shared-memory allreduce applies on x86-64 Linux only")
def test_sums_match_gloo_on_every_rank_and_ddp_trains_the_same(tmp_path: Path) -> None:
    world = 3
    mp.start_processes(_allreduce_worker, args=(world, free_port(), str(tmp_path)), nprocs=world, join=True,
                       start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    for r in ranks:
        assert r["mismatches"] == []
    for name in ranks[0]["ddp"]["0"]:
        for r in ranks:  # with the hook as with gloo
            torch.testing.assert_close(r["ddp"]["1"][name], r["ddp"]["0"][name], rtol=1e-5, atol=1e-6)
            if "running_" not in name and "num_batches" not in name:  # parameters: the same on every rank
                torch.testing.assert_close(r["ddp"]["1"][name], ranks[0]["ddp"]["1"][name], rtol=0, atol=0)
    assert not [p for p in os.listdir(shmreduce.SHM_DIR) if p.startswith("aiperf-ddp-")]  # unlinked


def test_it_applies_to_one_machines_cpu_ranks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shmreduce.platform, "machine", lambda: "x86_64")
    cpu = torch.device("cpu")
    assert shmreduce.applies(DistEnv(0, 2, 0, 2), cpu)
    assert not shmreduce.applies(DistEnv(0, 1, 0, 1), cpu)  # nothing to reduce
    assert not shmreduce.applies(DistEnv(0, 4, 0, 2), cpu)  # ranks on another node
    assert not shmreduce.applies(DistEnv(0, 2, 0, 2), torch.device("cuda", 0))  # NCCL's part
    monkeypatch.setenv(shmreduce.ENV, "0")
    assert not shmreduce.applies(DistEnv(0, 2, 0, 2), cpu)
    monkeypatch.delenv(shmreduce.ENV)
    monkeypatch.setattr(shmreduce.platform, "machine", lambda: "aarch64")  # stores may be seen out of order
    assert not shmreduce.applies(DistEnv(0, 2, 0, 2), cpu)


def test_a_peer_that_never_arrives_is_an_error() -> None:
    buffer = mmap.mmap(-1, ShmAllreduce.size(2, 64))
    lonely = ShmAllreduce(0, 2, 64, buffer, timeout_s=0.2)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not arrive"):
        lonely.allreduce_(torch.ones(4))
    assert time.monotonic() - started < 5


def test_a_tensor_larger_than_reserved_is_refused() -> None:
    reducer = ShmAllreduce(0, 1, 16, mmap.mmap(-1, ShmAllreduce.size(1, 16)))
    assert torch.equal(reducer.allreduce_(torch.arange(4.0)), torch.arange(4.0))  # one rank: itself
    with pytest.raises(ValueError, match="exceeds"):
        reducer.allreduce_(torch.ones(5))
