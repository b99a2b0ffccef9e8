"""One trial: train a graph for its epoch budget, data-parallel, and log every epoch.

    python -m aiperf_runner.train.trial TRIAL_DIR --attempt N [--nproc K]

TRIAL_DIR holds `graph.json`, `hparams.json` and `trial.json` (docs/internals.md, "Trial
program"; read by config.py). Processes: one per device (distenv.py finds the group). Under torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT) or `srun` (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the master is the first node
of the step) the program joins that process group; otherwise, with `--nproc K > 1`, it spawns K
local processes itself. NCCL on CUDA; on CPU gloo, and shared memory for the gradients when every
rank is on this machine (parallel.py, shmreduce.py).

Rank 0 writes the final weights to TRIAL_DIR/weights.safetensors (their SHA-256 in `trial_result`).
Rank 0 appends to TRIAL_DIR/events.jsonl: `epoch_end` after every epoch, `trial_result` at the
end, `trial_error` (and a non-zero exit) on an exception. After every epoch it writes
TRIAL_DIR/checkpoint.pt (model, optimizer, scaler, early-stopping state and the epoch's
`epoch_end` record) *before* logging the epoch; a later attempt resumes from it, first logging
that record if the crash came between the two. So no epoch is trained or logged twice. The write
runs in a thread while the next epoch trains (ckptwriter.py), which logs the epoch once the file is
in place. Rank 0 prints where the attempt's time went (start-up, validation, checkpoints) as
`aiperf-timing` lines of its stdout (rundir/timings.py).

The loop follows torchvision's classification reference: SGD with momentum 0.9, weight decay,
label smoothing, a learning rate scaled linearly with the global batch and decayed (cosine, per
iteration, after a linear warm-up) over the trial's own epoch budget (lrscale.py), evaluation on the whole validation set every epoch, early
stopping on validation loss. Each rank and its data-loader workers are pinned to the cores
nearest its device (util/cpubind.py; trial.json `cpu_bind`). Per step the loop does no host-device synchronisation: losses are
summed on the device and read once per epoch.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from aiperf_runner.rundir.checkpoints import CHECKPOINT, drop
from aiperf_runner.rundir.privacy import run_masker
from aiperf_runner.rundir.timings import AttemptTimes
from aiperf_runner.spec.eventlog import EventWriter, iter_events
from aiperf_runner.spec.records import EpochEnd
from aiperf_runner.spec.replay import Replay
from aiperf_runner.util.cpubind import bind_rank, format_cpulist, worker_init

from .builder import build_module
from .ckptwriter import CheckpointWriter, asynchronous_by_default
from .config import TrialConfig, TrialError
from .data import DataSpec, Normalizer, TrialData, build_data, default_workers
from .devices import accelerator_models
from .distenv import DistEnv, cpu_budget, detect_dist_env, free_port, listening_socket
from .lrscale import CosineSchedule, LrScaling
from .parallel import all_sum, broadcast_int, data_parallel, init_process_group, sync_buffers
from .precision import Precision, setup_precision
from .trainstate import Committer
from .weights import WEIGHTS, save_weights

EVENTS = "events.jsonl"
# Imported on first use by every attempt (torch.optim imports torch._dynamo: over a CPU-second);
# a warm-start zygote (backends/zygote.py) imports them once, before it forks attempts.
WARM_IMPORTS = ("torch._dynamo", "safetensors.torch", "numpy.random")
CHECKPOINT_FORMAT = "aiperf-checkpoint/1"
SPAWN_GRACE_S = 15.0  # after one spawned rank fails, how long the others get to finish logging
MOMENTUM = 0.9


# ---- processes ----------------------------------------------------------------------------------

def _device_for(cfg: TrialConfig, denv: DistEnv) -> torch.device:
    if cfg.device_type == "cuda":
        if not torch.cuda.is_available():
            raise TrialError("trial.json asks for device_type 'cuda' but CUDA is not available")
        count = torch.cuda.device_count()
        if denv.local_rank >= count:
            raise TrialError(f"local rank {denv.local_rank} but only {count} CUDA device(s) visible")
        torch.cuda.set_device(denv.local_rank)
        return torch.device("cuda", denv.local_rank)
    return torch.device("cpu")


# ---- training and evaluation ------------------------------------------------------------------

@dataclass
class EpochTotals:
    """One rank's totals, on the device (read once per epoch)."""

    samples: int  # images this rank trained (host int: batch sizes are known without a sync)
    loss_sum: torch.Tensor  # sum of per-batch mean loss x batch size


def train_one_epoch(model: nn.Module, criterion: nn.Module, optimizer: torch.optim.Optimizer,
                    data: TrialData, precision: Precision, scaler: torch.amp.GradScaler,
                    schedule: CosineSchedule, epoch: int, device: torch.device,
                    committer: Committer | None = None,
                    on_first_step: Callable[[], None] | None = None) -> EpochTotals:
    """`committer`: commits the state every so many steps and seeds each segment's random numbers
    (trainstate.py); the audit's replay (segment.py) calls this same loop for a segment's steps.
    `on_first_step`: called once the epoch's first optimizer step is done (timing the start-up)."""
    model.train()
    data.train.set_epoch(epoch)
    normalize: Normalizer = data.normalizer
    steps = len(data.train)
    loss_sum = torch.zeros((), dtype=torch.float32, device=device)
    samples = 0
    if committer is not None:
        committer.begin_epoch(epoch, steps)  # before the first batch is drawn: its augmentation is the segment's
    for step, (images, labels) in enumerate(data.train):
        schedule.set(epoch - 1 + step / steps)
        images = normalize(images)
        labels = labels.to(device, non_blocking=True)
        with precision.autocast():
            output = model(images)
            loss = criterion(output, labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        n = labels.shape[0]
        loss_sum.add_(loss.detach().float(), alpha=n)
        samples += n
        if committer is not None:
            committer.after_step(step + 1)
        if step == 0 and on_first_step is not None:
            on_first_step()
    return EpochTotals(samples, loss_sum)


@torch.no_grad()
def evaluate(model: nn.Module, data: TrialData, precision: Precision, device: torch.device) -> torch.Tensor:
    """This rank's shard of the validation set: tensor [images, correct, loss sum] (float64)."""
    model.eval()
    normalize = data.normalizer
    totals = torch.zeros(3, dtype=torch.float64, device=device)
    for images, labels in data.val:
        images = normalize(images)
        labels = labels.to(device, non_blocking=True)
        with precision.autocast():
            output = model(images)
        output = output.float()
        totals[0] += labels.shape[0]
        totals[1] += (output.argmax(dim=1) == labels).sum()
        totals[2] += F.cross_entropy(output, labels, reduction="sum")
    return totals


# ---- checkpoint ---------------------------------------------------------------------------------

def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Atomically: a crash leaves either the previous checkpoint or this one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


@dataclass
class Progress:
    """What survives between attempts (in the checkpoint)."""

    epoch: int = 0  # epochs completed
    best_accuracy: float = 0.0
    best_loss: float = math.inf
    bad_epochs: int = 0
    stop_reason: str | None = None  # "early_stop" once early stopping fired

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _logged_state(events_path: Path, trial: str) -> tuple[int, bool]:
    """(last epoch with an epoch_end line, whether a trial_result line exists), from the log's replay."""
    if not events_path.exists():
        return 0, False
    tr = Replay.load(events_path).trial(trial)
    return (tr.last_epoch, bool(tr.results)) if tr is not None else (0, False)


# ---- one process --------------------------------------------------------------------------------

def _seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def run_trial(trial_dir: Path, attempt: int, denv: DistEnv, *, raise_on_worker: bool = False) -> int:
    """Run (or resume) the trial in this process; returns the exit status.

    With `raise_on_worker`, a rank other than 0 re-raises its failure (after the usual clean-up)
    so that a spawning parent learns the cause; rank 0 always logs it as `trial_error`."""
    trial_dir = Path(trial_dir)
    is_main = denv.rank == 0
    writer: EventWriter | None = None
    trial_id = trial_dir.name
    try:
        if is_main:
            writer = EventWriter(trial_dir / EVENTS)
        cfg = TrialConfig.load(trial_dir)
        trial_id = cfg.trial
        device = _device_for(cfg, denv)
        budget = cpu_budget()  # this node's CPUs for the trial, before binding narrows them to the rank's
        cpus = _bind_cpus(cfg, denv, device)  # before the process group and data start threads
        init_process_group(denv, device)
        _train(cfg, trial_dir, attempt, denv, device, writer, cpus, budget)
        return 0
    except Exception as exc:  # noqa: BLE001 - every failure is logged, then reported by the exit status
        traceback.print_exc()
        if is_main:
            try:
                if writer is None:
                    writer = EventWriter(trial_dir / EVENTS)
                # Masked as written (this log is signed and published): see rundir/privacy.py.
                masker = run_masker(trial_dir.parent.parent)
                writer.append("trial_error", trial=trial_id, attempt=attempt,
                              error=masker.text(f"{type(exc).__name__}: {exc}")[:2000])
            except Exception:  # noqa: BLE001 - the log itself is unusable; stderr has the traceback
                traceback.print_exc()
        elif raise_on_worker:
            raise
        return 1
    finally:
        if writer is not None:
            writer.close()
        # Ranks this program forked leave by os._exit next (_spawn_entry), which ends the group as
        # surely; tearing it down first cost each attempt 20 ms on a CPU slot's critical path.
        if dist.is_available() and dist.is_initialized() and denv.source != "spawn":
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001
                pass


def _bind_cpus(cfg: TrialConfig, denv: DistEnv, device: torch.device) -> list[int] | None:
    """Pin this rank to its cores (util/cpubind.py); None when binding is off or left to srun."""
    if not cfg.cpu_bind or denv.source == "slurm":
        return None  # srun started every rank itself: its --cpu-bind owns placement
    cpus, node = bind_rank(denv.local_rank, denv.local_world_size, device.type == "cuda")
    if cpus:
        where = f"NUMA node {node}" if node is not None else "an even share"
        print(f"rank {denv.rank}: CPUs {format_cpulist(cpus)} ({where})", flush=True)
    return cpus or None


def _train(cfg: TrialConfig, trial_dir: Path, attempt: int, denv: DistEnv, device: torch.device,
           writer: EventWriter | None, cpus: list[int] | None = None,
           budget: int | None = None) -> dict[str, Any] | None:
    is_main = denv.rank == 0
    log = print if is_main else (lambda *a, **k: None)
    times = AttemptTimes(attempt) if is_main else None
    ckpt = load_checkpoint(trial_dir / CHECKPOINT)
    if not _resume(cfg, trial_dir, ckpt, denv, device, writer, log):
        return {}
    precision = setup_precision(cfg.precision, device)
    _configure_device(denv, device, cpus, budget)
    # channels_last: tensor cores on CUDA; on CPU oneDNN's convolutions run 20-35 % faster with it
    # (small ResNets, one thread; bench/harness_overhead.py --preset fashion-mnist prints both).
    channels_last = cfg.channels_last if cfg.channels_last is not None else True
    model, scaling, run, progress = _build(cfg, attempt, denv, device, precision, channels_last, cpus, ckpt, log,
                                           trial_dir)
    log(f"trial {cfg.trial} attempt {attempt}: {cfg.epoch_budget} epochs, {denv.world_size} process(es) on "
        f"{device.type}, {cfg.precision}, batch {cfg.batch_size}/device ({scaling.global_batch} global), lr "
        f"{scaling.peak_lr:g} ({scaling.rule} scaling of {cfg.lr:g}, warm-up {scaling.warmup_epochs:g} epochs), "
        f"train {run.data.train_size} / val {run.data.val_size} images", flush=True)
    lr_record: dict[str, Any] | None = scaling.record()  # for the attempt's first epoch
    accelerators: dict[str, int] | None = accelerator_models(denv, device)  # for the attempt's first epoch
    # Rank 0's checkpoints (every epoch: see _save_epoch) and its timing lines (rundir/timings.py).
    ckw = CheckpointWriter(trial_dir / CHECKPOINT, _write_checkpoint,
                           asynchronous=asynchronous_by_default()) if is_main else None
    if times is not None:
        times.ready()
    first_step = partial(_first_step_done, times, device) if times is not None else None
    try:
        while progress.epoch < cfg.epoch_budget and progress.stop_reason is None:
            epoch = progress.epoch + 1
            _seed_everything(cfg.seed * 1_000_003 + denv.rank * 7919 + epoch)  # dropout, augmentation
            m = _train_and_evaluate(run, model, epoch, denv, device, first_step)
            first_step = None
            _update_progress(progress, epoch, m.accuracy, m.val_loss, cfg.patience)
            record = EpochEnd(trial=cfg.trial, attempt=attempt, epoch=epoch, images_trained=m.images_trained,
                              images_evaluated=m.images_evaluated, val_accuracy=m.accuracy,
                              val_loss=m.val_loss if math.isfinite(m.val_loss) else None, started_at=m.started_at,
                              ended_at=m.ended_at, seconds=m.seconds, accelerators=accelerators or None,
                              lr_scaling=lr_record or None).as_event()
            accelerators = lr_record = None
            states = run.committer.record(cfg.trial, attempt, m.images_trained) if run.committer and is_main else None
            if ckw is not None:
                assert writer is not None
                t0 = time.perf_counter()
                waited = _save_epoch(ckw, writer, cfg, denv, model, run, progress, record, states)
                if times is not None:
                    times.epoch(epoch, train_s=m.train_s, val_s=m.val_s, checkpoint_s=time.perf_counter() - t0,
                                checkpoint_wait_s=waited, checkpoint=ckw.mode)
            log(f"epoch {epoch}/{cfg.epoch_budget}: train loss {m.train_loss:.4f}, val loss {m.val_loss:.4f}, "
                f"val acc {m.accuracy:.4f}, {m.images_trained} trained / {m.images_evaluated} evaluated in "
                f"{m.seconds:.1f} s ({m.images_trained / max(m.seconds, 1e-9):.0f} img/s)", flush=True)
        return _finish(cfg, trial_dir, attempt, is_main, progress, model, writer, log, ckw, times)
    finally:
        # The writer's thread ended; in a failed attempt, the write in flight finishes (and logs its
        # epoch) before run_trial logs trial_error.
        if ckw is not None and (late := ckw.close()) is not None:
            print(f"trial: {late}", file=sys.stderr, flush=True)


def _write_checkpoint(path: Path, state: dict[str, Any]) -> None:
    save_checkpoint(path, state)  # looked up when called: a test may replace save_checkpoint


def _first_step_done(times: AttemptTimes, device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # once per attempt: the step itself, not its launch
    times.first_step()


def _save_epoch(ckw: CheckpointWriter, writer: EventWriter, cfg: TrialConfig, denv: DistEnv, model: nn.Module,
                run: _Run, progress: Progress, record: dict[str, Any], states: dict[str, Any] | None) -> float:
    """Rank 0: the epoch's checkpoint, then its lines (`epoch_states`, `epoch_end`); the seconds spent
    waiting for the previous write.

    Every epoch is checkpointed: a line may be logged only once a checkpoint holds its epoch (a
    retry would otherwise train it again, or find the log ahead of the checkpoint and refuse to
    count it twice), and logging later than the epoch's end would lose the epochs trained when a
    run's time is up and delay the live score. Asynchronously (train/ckptwriter.py), the lines are
    appended by the writer's thread once the file is renamed into place: a crash before that leaves
    the previous checkpoint and no line (the epoch is trained again), a crash after it and before
    the lines is the case _resume_status logs once from the checkpoint, as with a synchronous save.
    Until the write is done nothing else appends to the log: the next save and _finish wait for it
    first, and so does a failing attempt before its trial_error (_train's finally)."""
    state = {"format": CHECKPOINT_FORMAT, "trial": cfg.trial, "arch_hash": cfg.graph.hash(),
             "model": model.state_dict(), "optimizer": run.optimizer.state_dict(),
             "scaler": run.scaler.state_dict(), "progress": progress.to_dict(), "epoch_record": record,
             "states_record": states, "world_size": denv.world_size}
    return ckw.save(state, then=partial(_log_epoch, writer, record, states))


def _log_epoch(writer: EventWriter, record: dict[str, Any], states: dict[str, Any] | None) -> None:
    if states is not None:
        writer.append("epoch_states", **states)
    writer.append("epoch_end", **record)


_TRAIN, _FINISHED, _INCONSISTENT = 0, 1, 2  # what _resume_status finds (broadcast to every rank)


def _resume(cfg: TrialConfig, trial_dir: Path, ckpt: dict[str, Any] | None, denv: DistEnv, device: torch.device,
            writer: EventWriter | None, log: Any) -> bool:
    """Where the trial stands: rank 0 reads the log and decides, everyone follows. False when it
    is already finished (nothing to do); TrialError where resuming would train an epoch twice or the
    checkpoint is another trial's."""
    status = _resume_status(cfg, trial_dir, ckpt, writer) if denv.rank == 0 else _TRAIN
    status = broadcast_int(status, denv, device)
    ckpt_path = trial_dir / CHECKPOINT
    if status == _FINISHED:
        log(f"trial {cfg.trial}: already finished (trial_result logged); nothing to do", flush=True)
        if denv.rank == 0 and ckpt_path.exists():
            ckpt_path.unlink()
        return False
    if status == _INCONSISTENT:
        raise TrialError(f"{trial_dir / EVENTS} has epochs the checkpoint does not (checkpoint missing or "
                         "stale): resuming would train and count them twice")
    if ckpt is not None:
        if ckpt.get("format") != CHECKPOINT_FORMAT or ckpt.get("arch_hash") != cfg.graph.hash():
            raise TrialError(f"{ckpt_path} belongs to another trial or format")
    return True


def _resume_status(cfg: TrialConfig, trial_dir: Path, ckpt: dict[str, Any] | None,
                   writer: EventWriter | None) -> int:
    """Rank 0: train, already finished (trial_result logged) or inconsistent (the log and the
    checkpoint disagree)."""
    logged, finished = _logged_state(trial_dir / EVENTS, cfg.trial)
    done = int(ckpt["progress"]["epoch"]) if ckpt else 0
    if finished:
        return _FINISHED
    if logged > done:
        return _INCONSISTENT
    if ckpt and done > logged and done == logged + 1:
        # Crashed between saving the checkpoint and logging its epoch: log it now, once.
        assert writer is not None
        if ckpt.get("states_record"):
            writer.append("epoch_states", **ckpt["states_record"])
        writer.append("epoch_end", **EpochEnd(**ckpt["epoch_record"]).as_event())
    elif ckpt and done > logged + 1:
        return _INCONSISTENT
    return _TRAIN


def _configure_device(denv: DistEnv, device: torch.device, cpus: list[int] | None, budget: int | None) -> None:
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    if device.type == "cpu":
        # Share the CPUs between this machine's processes: oversubscribed intra-op threads spin
        # against each other and can make a step many times slower. OMP_NUM_THREADS, when set,
        # is per process under torchrun/srun and for the whole trial when it spawns its own.
        # A bound rank runs at most one thread per CPU of its share (unless OMP_NUM_THREADS says).
        env_threads = int(os.environ.get("OMP_NUM_THREADS") or 0)
        share = (budget or cpu_budget()) // denv.local_world_size
        if cpus:
            share = min(share, len(cpus))
        if denv.source == "spawn":
            torch.set_num_threads(max(1, env_threads // denv.local_world_size if env_threads else share))
        elif not env_threads:
            torch.set_num_threads(max(1, share))


@dataclass
class _Run:
    """What an attempt trains with, besides the model itself."""

    ddp_model: nn.Module  # the model, wrapped for data parallelism when there is more than one process
    criterion: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    schedule: CosineSchedule
    precision: Precision
    data: TrialData
    committer: Committer | None = None  # None where trial.json asks for no commitments


def _build(cfg: TrialConfig, attempt: int, denv: DistEnv, device: torch.device, precision: Precision,
           channels_last: bool, cpus: list[int] | None, ckpt: dict[str, Any] | None,
           log: Any, trial_dir: Path) -> tuple[nn.Module, LrScaling, _Run, Progress]:
    """The model (the checkpoint's, if any: `ckpt` is emptied once restored), its optimizer, learning rate
    and data."""
    _seed_everything(cfg.seed)  # identical initial weights on every rank
    model = build_module(cfg.graph, num_classes=cfg.data.num_classes, dropout=cfg.dropout)
    model.to(device)
    model.to(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    try:
        scaling = LrScaling.from_settings(cfg.lr_scaling, base_lr=cfg.lr, batch_size=cfg.batch_size,
                                          world_size=denv.world_size, epoch_budget=cfg.epoch_budget)
    except (TypeError, ValueError) as exc:
        raise TrialError(f"trial.json lr_scaling: {exc}") from None
    optimizer = torch.optim.SGD(model.parameters(), lr=scaling.peak_lr, momentum=MOMENTUM,
                                weight_decay=cfg.weight_decay)
    scaler = precision.make_scaler()
    schedule = CosineSchedule.scaled(optimizer, scaling)
    progress = Progress()
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scaler.load_state_dict(ckpt["scaler"])
        progress = Progress(**ckpt["progress"])
        ckpt.clear()  # its tensors are copied into the model: free them before the data is loaded
        log(f"trial {cfg.trial} attempt {attempt}: resuming after epoch {progress.epoch}", flush=True)

    ddp_model: nn.Module = model
    if denv.world_size > 1:
        ddp_model = data_parallel(model, denv, device)
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    data = build_data(cfg.data, batch_size=cfg.batch_size, rank=denv.rank, world_size=denv.world_size,
                      device=device, shuffle_seed=cfg.seed, local_world_size=denv.local_world_size,
                      channels_last=channels_last, worker_init_fn=worker_init(cpus or ()),
                      workers=default_workers(1) if cpus else None)  # the rank's own share of CPUs
    committer = (Committer(trial_dir, model, optimizer, scaler, cfg.seed, denv.rank, cfg.commit_every_steps,
                           denv.rank == 0, cfg.keep_states) if cfg.commit_every_steps else None)
    return model, scaling, _Run(ddp_model, criterion, optimizer, scaler, schedule, precision, data,
                                committer), progress


@dataclass
class _Measured:
    """One epoch's figures, summed over the ranks."""

    started_at: float
    ended_at: float
    seconds: float
    train_s: float  # of `seconds`: training (and the ranks' sums of it)
    val_s: float  # of `seconds`: evaluating the validation set (and the ranks' sums)
    images_trained: int
    images_evaluated: int
    accuracy: float
    val_loss: float  # inf when nothing was evaluated
    train_loss: float  # nan when nothing was trained


def _train_and_evaluate(run: _Run, model: nn.Module, epoch: int, denv: DistEnv, device: torch.device,
                        on_first_step: Callable[[], None] | None = None) -> _Measured:
    """Train one epoch and evaluate the whole validation set, on every rank."""
    started_at = time.time()
    t0 = time.perf_counter()
    totals = train_one_epoch(run.ddp_model, run.criterion, run.optimizer, run.data, run.precision, run.scaler,
                             run.schedule, epoch, device, run.committer, on_first_step)
    train_sums = all_sum(torch.stack([totals.loss_sum.double(),
                                       torch.tensor(float(totals.samples), dtype=torch.float64, device=device)]),
                         denv)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # once per epoch: the training queued on the device counts as training
    t1 = time.perf_counter()
    if denv.world_size > 1:  # BN running statistics: rank 0's, as in the checkpoint
        sync_buffers(model)
    val = all_sum(evaluate(model, run.data, run.precision, device), denv).tolist()
    train = train_sums.tolist()
    ended_at = time.time()
    seconds = time.perf_counter() - t0

    images_trained, images_evaluated = int(round(train[1])), int(round(val[0]))
    accuracy = val[1] / images_evaluated if images_evaluated else 0.0
    val_loss = val[2] / images_evaluated if images_evaluated else math.inf
    train_loss = train[0] / images_trained if images_trained else math.nan
    return _Measured(started_at, ended_at, seconds, t1 - t0, t0 + seconds - t1, images_trained, images_evaluated,
                     accuracy, val_loss, train_loss)


def _update_progress(progress: Progress, epoch: int, accuracy: float, val_loss: float, patience: int | None) -> None:
    """The epoch counted, and early stopping on validation loss (a diverged loss stops at once)."""
    progress.epoch = epoch
    progress.best_accuracy = max(progress.best_accuracy, accuracy)
    if math.isfinite(val_loss) and val_loss < progress.best_loss:
        progress.best_loss, progress.bad_epochs = val_loss, 0
    else:
        progress.bad_epochs += 1
    if not math.isfinite(val_loss):
        progress.stop_reason = "early_stop"  # diverged: no later epoch can recover
    elif patience is not None and progress.bad_epochs >= patience:
        progress.stop_reason = "early_stop"


def _finish(cfg: TrialConfig, trial_dir: Path, attempt: int, is_main: bool, progress: Progress, model: nn.Module,
            writer: EventWriter | None, log: Any, ckw: CheckpointWriter | None = None,
            times: AttemptTimes | None = None) -> dict[str, Any]:
    """The trial's result: the final weights saved and `trial_result` logged (rank 0)."""
    reason = progress.stop_reason or "budget"
    result: dict[str, Any] = {"trial": cfg.trial, "attempt": attempt, "epochs": progress.epoch,
                              "best_accuracy": progress.best_accuracy, "reason": reason}
    if is_main:
        assert writer is not None
        # The final weights, and their digest in the result: the service may ask for them (its audit).
        # Written while the last epoch's checkpoint may still be: the model no longer changes.
        result["weights_sha256"] = save_weights(model, trial_dir / WEIGHTS)
        if ckw is not None:
            t0 = time.perf_counter()
            ckw.wait()  # the last epoch's line before the result
            if times is not None:
                times.end(checkpoint_s=time.perf_counter() - t0, writes_s=ckw.writes_s)
        writer.append("trial_result", **result)
        drop(trial_dir)
    log(f"trial {cfg.trial}: {progress.epoch} epochs, best accuracy {progress.best_accuracy:.4f} ({reason})",
        flush=True)
    return result


# ---- self-spawned processes ---------------------------------------------------------------------

def _spawn_entry(local_rank: int, trial_dir: str, attempt: int, nproc: int, port: int,
                 listen_fd: int | None = None) -> None:
    denv = DistEnv(local_rank, nproc, local_rank, nproc, "127.0.0.1", port, "spawn", listen_fd)
    os.environ.update({"RANK": str(local_rank), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(local_rank),
                       "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    code = run_trial(Path(trial_dir), attempt, denv, raise_on_worker=True)
    _exit_now(code)


def _exit_now(code: int) -> None:
    """Leave without interpreter finalisation. The trial's files are closed and synced by now;
    the C++ side of torch.distributed can still hold threads that abort the process
    ("terminate called without an active exception", SIGABRT) when static destructors run,
    which turned about one successful 2-process trial in 25 into a failed one."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _join_spawned(context: Any, grace_s: float) -> None:
    """Wait for every spawned process; after the first failure give the others `grace_s` to finish,
    so that rank 0 (the only one that writes the log) records its own error before it is stopped."""
    while not context.join(grace_period=grace_s):
        pass


def _failure_text(exc: BaseException) -> str:
    """The cause of a failed rank: the last line of its traceback where torch passed one on."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__


def _start_method(trial_dir: Path) -> str:
    """fork on CPU: the ranks share this process's imports and data (seconds of start-up each,
    against trials of seconds on small CPU presets); nothing here has started a thread or touched a
    device yet. spawn on CUDA, which a forked child cannot initialise after its parent did."""
    import json

    try:
        device_type = json.loads((trial_dir / "trial.json").read_text()).get("device_type", "cpu")
    except (OSError, ValueError, AttributeError):
        device_type = "cuda"  # unknown: the safe way; the rank reports the bad trial.json itself
    forkable = len(os.listdir("/proc/self/task")) == 1 if os.path.isdir("/proc/self/task") else False
    return "fork" if device_type == "cpu" and forkable else "spawn"


def spawn_local(trial_dir: Path, attempt: int, nproc: int) -> int:
    """Run `nproc` processes of this trial on this machine (DDP over localhost)."""
    import torch.multiprocessing as mp

    events = trial_dir / EVENTS
    before = sum(1 for _ in iter_events(events, allow_partial_tail=True)) if events.exists() else 0
    method = _start_method(trial_dir)
    # Forked ranks inherit a socket already listening for their store (spawned ones inherit no
    # descriptor: they meet on a free port, and a rank that connects before rank 0 listens retries).
    listener = listening_socket() if method == "fork" else None
    rendezvous = (listener.getsockname()[1], listener.fileno()) if listener is not None else (free_port(), None)
    try:
        context = mp.start_processes(_spawn_entry, args=(str(trial_dir), attempt, nproc, *rendezvous),
                                     nprocs=nproc, join=False, start_method=method)
        _join_spawned(context, SPAWN_GRACE_S)
        return 0
    except Exception as exc:  # noqa: BLE001 - a rank failed; make sure the log says so
        print(f"trial: a process failed: {exc}", file=sys.stderr, flush=True)
        try:
            new = [e.data for i, e in enumerate(iter_events(events, allow_partial_tail=True)) if i >= before] \
                if events.exists() else []
            if not any(d["type"] == "trial_error" for d in new):
                with EventWriter(events) as writer:
                    writer.append("trial_error", trial=trial_dir.name, attempt=attempt,
                                  error=f"a training process failed: {_failure_text(exc)}"[:2000])
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        return 1
    finally:
        if listener is not None:
            listener.close()


# ---- warm start ---------------------------------------------------------------------------------

def warm_up(run_dir: Path) -> None:
    """What every attempt of the run at `run_dir` would load for itself, loaded once in the
    zygote that forks them (backends/zygote.py): the lazy imports, and the smoke data set, which
    each attempt would otherwise generate (it is kept per process by `smoke_tensors`)."""
    import importlib
    import json

    for name in WARM_IMPORTS:
        importlib.import_module(name)
    try:
        dataset = json.loads((Path(run_dir) / "run.json").read_text())["dataset"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if isinstance(dataset, dict) and dataset.get("name") == "smoke":
        from .data import smoke_tensors

        spec = DataSpec.from_trial({"dataset": dataset})
        assert spec.train_images is not None and spec.val_images is not None
        smoke_tensors(spec.train_images, spec.num_classes, spec.image_size, spec.seed, "train")
        smoke_tensors(spec.val_images, spec.num_classes, spec.image_size, spec.seed, "val")


# ---- command line -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiperf_runner.train.trial",
                                     description="Train one AIPerf trial (graph.json, hparams.json, trial.json).")
    parser.add_argument("trial_dir", type=Path)
    parser.add_argument("--attempt", type=int, default=1, help="1-based attempt number, logged with every event")
    parser.add_argument("--nproc", type=int, default=1,
                        help="processes to spawn on this machine when not launched by torchrun/srun")
    args = parser.parse_args(argv)
    try:
        denv = detect_dist_env()
    except TrialError as exc:
        print(f"trial: {exc}", file=sys.stderr)
        return 2
    if denv is None and args.nproc > 1:
        return spawn_local(args.trial_dir, args.attempt, args.nproc)
    return run_trial(args.trial_dir, args.attempt, denv or DistEnv())


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: spawned processes then unpickle
    # `aiperf_runner.train.trial._spawn_entry` by its real name.
    from aiperf_runner.train import trial as _trial

    _trial._exit_now(_trial.main())
