"""A trial's final weights: saved as safetensors (never a pickle: the service loads files from
outside), with the SHA-256 that the trial's result and the log record (docs/design.md section 7, layer 3)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch
from torch import nn

from aiperf_runner.spec.retention import WEIGHTS

__all__ = ["WEIGHTS", "file_sha256", "load_weights", "save_weights"]


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_weights(model: nn.Module, path: str | Path) -> str:
    """Write the model's state (parameters and buffers, on the CPU, contiguous) atomically; its SHA-256."""
    from safetensors.torch import save_file

    path = Path(path)
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    tmp = path.with_name(path.name + ".tmp")
    save_file(state, str(tmp))
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return file_sha256(path)


def load_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file (ValueError for anything else: a pickle, a truncated file)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ValueError(f"not a readable safetensors file: {exc}") from None
