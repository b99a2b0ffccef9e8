"""Numeric precision of a trial: fp32, tf32, bf16 or fp16.

- `fp32`: IEEE float32 everywhere. TF32 is switched *off* for matmuls and cuDNN convolutions
  (cuDNN allows TF32 by default, which would make an "fp32" result silently run TF32).
- `tf32`: float32 tensors, TF32 tensor-core math for matmuls and convolutions (CUDA only; on other
  devices it is plain fp32).
- `bf16`: `torch.autocast(device, torch.bfloat16)`; works on CPU and CUDA. Weights, gradients and
  optimizer state stay float32. No loss scaling (bf16 has float32's exponent range).
- `fp16`: `torch.autocast(device, torch.float16)` with a `GradScaler` (dynamic loss scaling).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from aiperf_runner.spec.peaks import PRECISIONS

_AUTOCAST_DTYPE = {"fp32": None, "tf32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def _set_tf32(enabled: bool) -> None:
    mode = "tf32" if enabled else "ieee"
    matmul = torch.backends.cuda.matmul
    conv = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(matmul, "fp32_precision") and conv is not None and hasattr(conv, "fp32_precision"):
        # torch >= 2.9: the fine-grained API (mixing it with allow_tf32 is an error there).
        matmul.fp32_precision = mode
        conv.fp32_precision = mode
    else:  # pragma: no cover - older torch
        matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


@dataclass(frozen=True)
class Precision:
    """How a trial computes: `autocast()` wraps forward + loss; `scaler` wraps backward/step."""

    name: str
    device_type: str
    dtype: torch.dtype | None  # autocast dtype, None = no autocast

    @property
    def uses_scaler(self) -> bool:
        return self.dtype == torch.float16

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def make_scaler(self) -> torch.amp.GradScaler:
        """A GradScaler, enabled only for fp16 (a disabled one is a pass-through)."""
        return torch.amp.GradScaler(self.device_type, enabled=self.uses_scaler)


def setup_precision(name: str, device: torch.device | str) -> Precision:
    """Validate `name`, set the process-wide TF32 switches, and return the Precision to use."""
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r} (expected one of {', '.join(PRECISIONS)})")
    device_type = torch.device(device).type
    _set_tf32(name == "tf32")
    return Precision(name, device_type, _AUTOCAST_DTYPE[name])
