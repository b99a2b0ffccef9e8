"""A trial's whole training state as one file, and its digest: what a commitment names (spec/proof.py).

The state is the model's tensors (parameters and buffers), SGD's momentum per parameter and the
loss scaler's state, written as a safetensors file (`model/NAME`, `momentum/NAME`; the scaler's
numbers in the metadata). The commitment is the SHA-256 of the file's bytes, which depend only on
the tensors' values (safetensors orders its header and data; nothing else is written), so the
service hashes an uploaded state exactly as the trial did. States are kept in the trial's
`states/` directory, named by their digest, until the service's audit is over.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aiperf_runner.spec.proof import STATES, commit_points, segment_seed

FORMAT = "aiperf-state/1"


def _named_momentum(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    names = {id(p): name for name, p in model.named_parameters()}
    out = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            buf = optimizer.state.get(p, {}).get("momentum_buffer")
            if buf is not None:
                out[f"momentum/{names[id(p)]}"] = buf
    return out


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: Any | None = None) -> bytes:
    """The state file's bytes (contiguous CPU copies of every tensor)."""
    from safetensors.torch import save

    tensors = {f"model/{k}": v for k, v in model.state_dict().items()}
    tensors.update(_named_momentum(model, optimizer))
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    scaler_state = scaler.state_dict() if scaler is not None else {}
    # One metadata entry: safetensors writes a metadata map in no fixed order (it differs between
    # processes), and the digest must not.
    return save(tensors, metadata={"aiperf": json.dumps({"format": FORMAT, "scaler": scaler_state}, sort_keys=True)})


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_state(folder: Path, data: bytes) -> str:
    """Store a state under its digest (once); the digest."""
    sha = digest(data)
    path = Path(folder) / STATES / f"{sha}.safetensors"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{sha}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return sha


def state_path(folder: Path, sha: str) -> Path:
    return Path(folder) / STATES / f"{sha}.safetensors"


def load_state(data: bytes, model: nn.Module, optimizer: torch.optim.Optimizer, scaler: Any | None = None) -> None:
    """Put a state file's contents into a model built from the same graph and its optimizer.
    ValueError when the file is not a state of this model."""
    from safetensors.torch import load

    try:
        tensors = load(data)
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own types for a damaged file
        raise ValueError(f"not a safetensors file: {exc}") from None
    model_state = {k[len("model/"):]: v for k, v in tensors.items() if k.startswith("model/")}
    try:
        model.load_state_dict(model_state, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"the state does not fit the trial's graph: {str(exc)[:300]}") from None
    params = dict(model.named_parameters())
    for key, value in tensors.items():
        if key.startswith("momentum/"):
            name = key[len("momentum/"):]
            if name not in params or params[name].shape != value.shape:
                raise ValueError(f"momentum for {name!r} does not fit the trial's graph")
            optimizer.state[params[name]]["momentum_buffer"] = value.to(params[name].device).clone()
    if scaler is not None:
        saved = json.loads(metadata(data).get("aiperf") or "{}").get("scaler") or {}
        if saved:
            scaler.load_state_dict(saved)


def metadata(data: bytes) -> dict[str, str]:
    """A safetensors file's metadata (its header: an 8-byte little-endian length, then JSON)."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    return dict(header.get("__metadata__") or {})


class Committer:
    """Commits a trial's state as it trains (spec/proof.py): each rank seeds torch's generator at the
    start of every segment; rank 0 stores the state after every commitment point and makes the
    epoch's `epoch_states` record."""

    def __init__(self, trial_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scaler: Any,
                 trial_seed: int, rank: int, every: int, is_main: bool, keep: bool = True) -> None:
        self.trial_dir, self.model, self.optimizer, self.scaler = Path(trial_dir), model, optimizer, scaler
        self.trial_seed, self.rank, self.every, self.is_main, self.keep = trial_seed, rank, every, is_main, keep
        self.epoch, self.steps = 0, 0
        self.points: set[int] = set()
        self.commits: list[list[Any]] = []
        # The state the attempt starts from (rank 0): the initial weights, or the checkpoint's, which is
        # the state the epoch before ended with.
        self.start = self._commit() if is_main else ""

    def _commit(self) -> str:
        data = state_bytes(self.model, self.optimizer, self.scaler)
        return save_state(self.trial_dir, data) if self.keep else digest(data)  # unwitnessed: never audited

    def reseed(self, step: int) -> None:
        torch.manual_seed(segment_seed(self.trial_seed, self.rank, self.epoch, step))

    def begin_epoch(self, epoch: int, steps: int) -> None:
        self.epoch, self.steps = epoch, steps
        self.points = set(commit_points(steps, self.every, ramp=epoch == 1))
        self.commits = []
        self.reseed(0)

    def after_step(self, step: int) -> None:
        """`step` optimizer steps of the epoch are done."""
        if step not in self.points:
            return
        if self.is_main:
            self.commits.append([step, self._commit()])
        self.reseed(step)

    def record(self, trial: str, attempt: int, images_trained: int) -> dict[str, Any]:
        """The epoch's `epoch_states` fields (rank 0); the next epoch starts from its last state."""
        rec = {"trial": trial, "attempt": attempt, "epoch": self.epoch, "steps": self.steps,
               "images_trained": images_trained, "start": self.start, "commits": list(self.commits),
               "threads": torch.get_num_threads()}
        if self.commits:
            self.start = self.commits[-1][1]
        return rec
