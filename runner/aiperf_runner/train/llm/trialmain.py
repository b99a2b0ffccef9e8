"""One AIPerf-LLM trial, as the LLM controller (run/llmrun.py) launches it through its backend:
`python -m aiperf_runner.train.llm.trialmain TRIAL_DIR`.

The trial reads `TRIAL_DIR/trial.json` (its architecture, parent, growths, hyper-parameters and step budget),
builds its model — the preset's seed, or its parent's final weights and AdamW moments grown by the logged
growths, each checked to keep the parent's function on the probe batch — trains it data-parallel over its
slot's `world` processes (gloo on CPU, NCCL on CUDA), evaluates it with the frozen evaluation and, from rank 0,
writes `weights.safetensors`, `optimizer.safetensors` (a child's inheritance) and its own hash-chained log
`events.jsonl`: one `train_end` {trial, attempt, steps, tokens_trained, flops, val_loss, started_at, ended_at,
growth_gap, growths} and one `trial_result` (with both files' SHA-256, `weights_sha256` and `optimizer_sha256`, which the
controller's `trial_finished` records), or `trial_error` when it fails (exit status 1). A growth that changed the
function beyond `spec.llmrules.GROWTH_TOLERANCE` is an error: its child never trains.

Its ranks: started alone (the local backend, a one-node SLURM job) it spawns `world` processes itself
(torch.multiprocessing, a file rendezvous in the trial directory); started as one process per rank by a launcher
(torchrun, as the slurm backend runs a multi-node trial, or srun: train/distenv.py `detect_dist_env`) it runs its
own rank, meeting the others at env:// (MASTER_ADDR, MASTER_PORT) or else tcp:// at the address SLURM gives, on
its LOCAL_RANK's GPU; the launcher's world must be trial.json's. Each rank's threads: $AIPERF_THREADS_PER_RANK
(the local backend's share of the cores), else the CPUs this process may use here over the ranks on this node.

A shard preset's trial (`llm`, `llm-bytes`) reads the run's token shards (data/llmshards.py): their directory from
the run's `local/private.json` (`data`: never bundled, as an image run's data root), their manifest's digest from
`trial.json` (`data_digest`, the run's); shards with another manifest are refused (`trial_data`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from aiperf_runner.data.llmshards import TokenData, open_for_preset
from aiperf_runner.data.llmtext import KJV_NAME, TextData, kjv_data, smoke_text
from aiperf_runner.rundir.privacy import read_private
from aiperf_runner.spec.eventlog import EventWriter
from aiperf_runner.spec.llmflops import LlmArch, LlmLayer
from aiperf_runner.spec.llmrules import GROWTH_TOLERANCE, PROBE_SEQUENCES, LlmPreset, llm_preset

from ..config import TrialError
from ..distenv import DistEnv, cpu_budget, detect_dist_env
from ..weights import file_sha256, load_weights, save_weights
from .model import build_model
from .morph import Growth, add_heads, function_gap, insert_block, widen_mlp
from .trainer import Budget, LlmHparams, Session, grow, make_optimizer, new_session, train

WEIGHTS = "weights.safetensors"
OPTIMIZER = "optimizer.safetensors"
_MOMENTS = ("exp_avg", "exp_avg_sq", "step")


class GrowthRefused(RuntimeError):
    """A growth changed the parent's function beyond the tolerance."""


def preset_data(preset: LlmPreset) -> TextData:
    """The preset's text, checked against the digests the rules bind it to: llm-smoke's generated text, or
    the King James text extracted from Debian's bible-kjv-text (data/llmtext.py; cached after the first
    trial, so each trial reads a file)."""
    if preset.data.startswith("llm-smoke/"):
        data, how = smoke_text(), "generated"
    elif preset.data == KJV_NAME:
        data, how = kjv_data(), "extracted"
    else:
        raise ValueError(f"{preset.name}: no reader for data {preset.data!r}")
    if (data.train_sha256, data.val_sha256) != (preset.train_sha256, preset.val_sha256):
        raise ValueError(f"{preset.name}: the {how} text's digests differ from the preset's (train "
                         f"{data.train_sha256[:12]}..., {len(data.train)} bytes; val {data.val_sha256[:12]}..., "
                         f"{len(data.val)} bytes)")
    return data


def trial_data(preset: LlmPreset, spec: dict[str, Any], trial_dir: Path) -> TextData | TokenData:
    """The trial's data: a byte preset's text (`preset_data`), or a shard preset's shards in the run's data
    directory (local/private.json `data`) whose manifest has the run's digest (trial.json `data_digest`)."""
    if preset.shards is None:
        return preset_data(preset)
    root, digest = read_private(trial_dir.parent.parent).get("data"), spec.get("data_digest")
    if not root or not digest:
        raise ValueError(f"{preset.name}: the run's shard directory (local/private.json data) or their manifest's "
                         "digest (trial.json data_digest) is not recorded")
    return open_for_preset(root, preset, digest)


def probe_batch(val: bytes | np.ndarray, arch: LlmArch) -> torch.Tensor:
    """The fixed batch a growth is checked on: the first PROBE_SEQUENCES windows of the validation text."""
    n = arch.seq_len
    if isinstance(val, np.ndarray):  # a shard preset's validation tokens
        return torch.from_numpy(val[:PROBE_SEQUENCES * n].astype(np.int64)).reshape(PROBE_SEQUENCES, n)
    return torch.tensor(list(val[:PROBE_SEQUENCES * n]), dtype=torch.long).reshape(PROBE_SEQUENCES, n)


def save_moments(session: Session, path: Path) -> None:
    """AdamW's per-parameter state as safetensors (`exp_avg/NAME`, `exp_avg_sq/NAME`, `step/NAME`)."""
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    for name, p in session.model.named_parameters():
        for key, value in session.optimizer.state.get(p, {}).items():
            if key in _MOMENTS and isinstance(value, torch.Tensor):
                tensors[f"{key}/{name}"] = value.detach().to("cpu").contiguous().reshape(value.shape)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, path)


def parent_files(trial_dir: Path, parent: str) -> tuple[Path, Path]:
    """A parent's final weights and AdamW moments as a trial finds them: in its sibling directory."""
    return trial_dir.parent / parent / WEIGHTS, trial_dir.parent / parent / OPTIMIZER


def load_session(arch: LlmArch, weights: Path, optimizer_file: Path | None, hp: LlmHparams,
                 device: torch.device) -> Session:
    """A finished trial's model and AdamW, from its weights and moments (none when `optimizer_file` is absent)."""
    model = build_model(arch).to(device)
    model.load_state_dict({k: v.to(device) for k, v in load_weights(weights).items()})
    optimizer = make_optimizer(model, hp)
    moments = load_weights(optimizer_file) if optimizer_file is not None and optimizer_file.exists() else {}
    for name, p in model.named_parameters():
        state = {key: moments[f"{key}/{name}"].to(device) for key in _MOMENTS if f"{key}/{name}" in moments}
        if state:
            optimizer.state[p] = state
    return Session(model, optimizer)


def apply_growth(session: Session, growth: dict[str, Any], hp: LlmHparams, seed: int) -> Growth:
    gen = torch.Generator().manual_seed(seed)
    model, arch, kind = session.model, session.arch, growth["kind"]
    if kind == "insert_block":
        return insert_block(model, arch, growth["index"], LlmLayer.from_dict(growth["layer"]), generator=gen)
    if kind == "widen_mlp":
        return widen_mlp(model, arch, growth["layer"], growth["new_hidden"], generator=gen)
    if kind == "add_heads":
        return add_heads(model, arch, growth["layer"], growth["n"], generator=gen)
    raise ValueError(f"unknown growth {kind!r}")


def build_session(spec: dict[str, Any], parent: tuple[Path, Path | None] | None, data: TextData | TokenData,
                  hp: LlmHparams, device: torch.device) -> tuple[Session, float | None]:
    """The trial's starting point and the largest logit change its growths made (None for a seed). `spec`: the
    trial's arch, parent, parent_arch, growths and seed (trial.json; the audit's re-execution takes them from the
    log); `parent`: the parent's weights and moments files (`parent_files`), None for a seed trial."""
    arch = LlmArch.from_dict(spec["arch"])
    if spec.get("parent") is None:
        return new_session(arch, hp, seed=spec["seed"], device=device), None
    if parent is None:
        raise ValueError(f"a child of {spec['parent']} needs its parent's weights and moments")
    session = load_session(LlmArch.from_dict(spec["parent_arch"]), parent[0], parent[1], hp, device)
    probe, gap = probe_batch(data.val, arch).to(device), 0.0
    for i, growth in enumerate(spec["growths"]):
        grown = apply_growth(session, growth, hp, spec["seed"] * 1000 + i)
        gap = max(gap, function_gap(session.model, grown.model.to(device), probe))
        if gap > GROWTH_TOLERANCE:
            raise GrowthRefused(f"growth {i + 1} ({growth['kind']}) changed the logits on the probe batch by "
                                f"{gap:.3g} (tolerance {GROWTH_TOLERANCE:g})")
        session = grow(session, grown, hp)
    if session.arch != arch:
        raise ValueError("the growths do not give the trial's architecture")
    return session, gap


def run_rank(rank: int, world: int, trial_dir: Path, spec: dict[str, Any], rendezvous: str,
             local_rank: int | None = None) -> None:
    """Rank `rank` of `world`, on the GPU of its `local_rank` (its rank where it spawned its node's ranks)."""
    if world > 1:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, init_method=rendezvous, rank=rank, world_size=world)
    gpu = rank if local_rank is None else local_rank
    device = torch.device(f"cuda:{gpu % torch.cuda.device_count()}" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    log = EventWriter(trial_dir / "events.jsonl") if rank == 0 else None
    try:
        preset = llm_preset(spec["preset"])
        hp = LlmHparams(**spec["hparams"])
        data = trial_data(preset, spec, trial_dir)
        assert data.train is not None
        parent = parent_files(trial_dir, spec["parent"]) if spec.get("parent") is not None else None
        session, gap = build_session(spec, parent, data, hp, device)
        started = time.time()
        result = train(session, data.train, hp, Budget(steps=spec["steps"]), seed=spec["seed"], device=device,
                       val=data.val)
        ended = time.time()
        if log is not None:
            sha = save_weights(session.model, trial_dir / WEIGHTS)
            save_moments(session, trial_dir / OPTIMIZER)
            optimizer_sha = file_sha256(trial_dir / OPTIMIZER)
            log.append("train_end", trial=spec["trial"], attempt=spec["attempt"], steps=result.steps,
                       tokens_trained=result.train_tokens, flops=result.flops, val_loss=result.val_loss,
                       train_loss=result.train_loss, started_at=started, ended_at=ended, growth_gap=gap,
                       growths=[g["kind"] for g in spec["growths"]], world=world)
            log.append("trial_result", trial=spec["trial"], attempt=spec["attempt"], val_loss=result.val_loss,
                       weights_sha256=sha, optimizer_sha256=optimizer_sha)
    except Exception as exc:
        if log is not None:
            log.append("trial_error", trial=spec["trial"], attempt=spec["attempt"],
                       error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if log is not None:
            log.close()
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _threads(ranks_here: int) -> int:
    """Intra-op threads of each rank: the local backend's share ($AIPERF_THREADS_PER_RANK), else this process's
    CPUs (a SLURM job's allocation on its node) over the ranks on this node."""
    given = os.environ.get("AIPERF_THREADS_PER_RANK", "")
    return max(1, int(given)) if given.isdigit() else max(1, cpu_budget() // max(1, ranks_here))


def _exit_done() -> None:
    """Done and logged (the files written, the log closed, the group destroyed): gloo's threads can abort the
    interpreter's finalisation (SIGABRT, "terminate called without an active exception"; 4 of 30 two-rank trials
    on a CPU), which failed a trial that had finished. As tests/train/test_llm_trainer.py's ranks exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _spawned(rank: int, world: int, trial_dir: str, spec: dict[str, Any], rendezvous: str) -> None:
    torch.set_num_threads(_threads(world))
    run_rank(rank, world, Path(trial_dir), spec, rendezvous)
    _exit_done()


def rendezvous_of(denv: DistEnv) -> str:
    """Where the ranks of a launcher meet: env:// with torchrun's (or the batch script's) MASTER_ADDR and
    MASTER_PORT, so that torch takes torchrun's own store where it offers one; else tcp:// at the address and port
    distenv derived from SLURM's variables (srun)."""
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        return "env://"
    return f"tcp://{denv.master_addr}:{denv.master_port}"


def run_launched(denv: DistEnv, trial_dir: Path, spec: dict[str, Any]) -> None:
    """This process's rank of a trial whose launcher started one process per rank."""
    world = int(spec.get("world", 1))
    if denv.world_size != world:
        raise TrialError(f"launched as rank {denv.rank} of {denv.world_size} ({denv.source}), but trial.json's "
                         f"world is {world}")
    torch.set_num_threads(_threads(denv.local_world_size))
    run_rank(denv.rank, denv.world_size, trial_dir, spec, rendezvous_of(denv), local_rank=denv.local_rank)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m aiperf_runner.train.llm.trialmain TRIAL_DIR", file=sys.stderr)
        return 2
    trial_dir = Path(args[0])
    spec = json.loads((trial_dir / "trial.json").read_text())
    world = int(spec.get("world", 1))
    try:
        denv = detect_dist_env()
        if denv is not None and denv.world_size > 1:
            run_launched(denv, trial_dir, spec)
            _exit_done()
        elif world == 1:
            torch.set_num_threads(_threads(1))
            run_rank(0, 1, trial_dir, spec, "")
        else:
            fd, name = tempfile.mkstemp(prefix="rdzv-", dir=trial_dir)
            os.close(fd)
            os.unlink(name)  # the file rendezvous wants a path that does not exist yet
            torch.multiprocessing.spawn(_spawned, args=(world, str(trial_dir), spec, f"file://{name}"),
                                        nprocs=world, join=True)
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
