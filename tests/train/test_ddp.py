"""Data parallelism on CPU processes (gloo): same gradients as one process, exact counts.

Batch norm and the gradient test: in training mode BatchNorm normalises each process's slice of
the batch with that slice's own mean and variance, so the loss of a 2-process step is not the
loss of one process on the whole batch and their gradients differ (that is how DDP without
SyncBatchNorm trains, here as in the original AIPerf). SyncBatchNorm would make them equal, but
torch implements it for accelerators only, not for CPU/gloo. The test therefore checks
(a) the real training step `train_one_epoch` on a graph without batch norm, and (b) small_resnet
with batch norm in eval mode (running statistics: every image is normalised independently of
the others). In both, DDP's average of the per-process mean gradients must equal the mean
gradient over the whole batch.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from aiperf_runner.spec.eventlog import read_events
from aiperf_runner.spec.graph import Graph
from aiperf_runner.spec.seeds import small_resnet
from aiperf_runner.train.builder import build_module
from aiperf_runner.train.data import DataSpec, build_data
from aiperf_runner.train.distenv import free_port
from aiperf_runner.train.precision import setup_precision
from aiperf_runner.train.trial import CHECKPOINT, CosineSchedule, train_one_epoch
from torch import nn

from tests.train.conftest import TINY_DATASET, run_trial_program, write_trial_dir

GLOBAL_BATCH = 16
SPEC = DataSpec("smoke", 10, 16, train_images=GLOBAL_BATCH, val_images=8)


def no_bn_graph() -> Graph:
    g = Graph([(3, 16, 16)], [])
    x = g.add_layer("conv2d", [0], in_channels=3, filters=8, kernel_size=3, stride=1, padding=1)
    x = g.add_layer("relu", [x])
    x = g.add_layer("conv2d", [x], in_channels=8, filters=16, kernel_size=3, stride=2, padding=1)
    x = g.add_layer("relu", [x])
    x = g.add_layer("global_avgpool2d", [x])
    g.add_layer("dense", [x], in_units=16, units=10)
    return g


def first_step(rank: int, world: int, out: Path) -> None:
    """One training step on this rank's shard of the first global batch; saves the gradients."""
    batch = GLOBAL_BATCH // world
    device = torch.device("cpu")
    precision = setup_precision("fp32", device)
    results = {}

    # (a) The trial's own train_one_epoch: the dataset is one global batch, so one step.
    torch.manual_seed(0)
    model = build_module(no_bn_graph())
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    data = build_data(SPEC, batch_size=batch, rank=rank, world_size=world, shuffle_seed=0)
    totals = train_one_epoch(ddp, nn.CrossEntropyLoss(label_smoothing=0.1), optimizer, data, precision,
                             precision.make_scaler(), CosineSchedule(optimizer, 0.1, 1), 1, device)
    assert totals.samples == batch
    results["train_one_epoch"] = {n: p.grad.clone() for n, p in model.named_parameters()}
    results["labels"] = torch.cat([y for _, y in data.train])

    # (b) small_resnet with batch norm in eval mode.
    torch.manual_seed(0)
    model = build_module(small_resnet(10, 16, width=8))
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    model.eval()
    images, labels = next(iter(data.train))
    loss = nn.CrossEntropyLoss(label_smoothing=0.1)(ddp(data.normalizer(images)), labels)
    loss.backward()
    results["small_resnet_eval_bn"] = {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.save(results, out / f"rank{rank}.pt")


def _worker(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        first_step(rank, world, Path(out))
    finally:
        dist.destroy_process_group()
    os._exit(0)  # as the trial program does: gloo's threads can abort interpreter finalisation


@pytest.mark.slow
def test_ddp_two_processes_match_one_process_gradients(tmp_path: Path) -> None:
    single = tmp_path / "single"
    single.mkdir()
    first_step(0, 1, single)
    mp.start_processes(_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    one = torch.load(single / "rank0.pt")
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    # The two shards together are the single process's batch.
    assert sorted(torch.cat([r["labels"] for r in ranks]).tolist()) == sorted(one["labels"].tolist())
    for part in ("train_one_epoch", "small_resnet_eval_bn"):
        names = list(one[part])
        assert names
        for name in names:
            for r in ranks:  # DDP leaves the same averaged gradient on every rank
                torch.testing.assert_close(r[part][name], ranks[0][part][name], rtol=0, atol=0)
            torch.testing.assert_close(ranks[0][part][name], one[part][name], rtol=1e-4, atol=1e-6,
                                       msg=lambda m, n=name, p=part: f"{p}: {n}: {m}")


@pytest.mark.slow
def test_trial_program_spawns_data_parallel_processes(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0011", epoch_budget=1)
    proc = run_trial_program(d, "--attempt", "1", "--nproc", "2")
    assert proc.returncode == 0, proc.stderr
    assert "2 process(es)" in proc.stdout
    events = read_events(d / "events.jsonl")
    assert [e["type"] for e in events] == ["epoch_end", "trial_result"]  # rank 0 only
    end = events[0]
    # Training: each rank its padded half; validation: each image exactly once (101 is odd).
    assert end["images_trained"] == 2 * math.ceil(TINY_DATASET["train_images"] / 2)
    assert end["images_evaluated"] == TINY_DATASET["val_images"]
    assert end["accelerators"] == {"cpu": 2}  # gathered from both ranks
    assert not (d / CHECKPOINT).exists()


@pytest.mark.slow
def test_spawned_process_failure_is_logged(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0012", epoch_budget=1, device_type="tpu")
    proc = run_trial_program(d, "--attempt", "1", "--nproc", "2")
    assert proc.returncode != 0
    errors = [e for e in read_events(d / "events.jsonl") if e["type"] == "trial_error"]
    assert len(errors) == 1 and "device_type" in errors[0]["error"]


def _rank_one_fails(rank: int, out: str) -> None:
    if rank == 1:
        raise RuntimeError("rank 1 ran out of memory")
    import time
    time.sleep(1.0)  # rank 0 is slower to notice, as when it logs its own error
    Path(out, "rank0-finished").write_text("yes")


def test_spawn_join_lets_rank_zero_finish_and_names_the_cause(tmp_path: Path) -> None:
    from aiperf_runner.train.trial import _failure_text, _join_spawned

    context = mp.start_processes(_rank_one_fails, args=(str(tmp_path),), nprocs=2, join=False,
                                 start_method="spawn")
    with pytest.raises(mp.ProcessRaisedException) as caught:
        _join_spawned(context, grace_s=20)
    assert (tmp_path / "rank0-finished").exists()  # not terminated at rank 1's failure
    assert _failure_text(caught.value) == "RuntimeError: rank 1 ran out of memory"
