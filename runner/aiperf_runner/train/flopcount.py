"""Measured FLOPs of a built module with `torch.utils.flop_counter.FlopCounterMode` (tests, bench).

FlopCounterMode counts convolutions and matrix products only (2 FLOP per multiply-accumulate),
forward and backward; it counts zero for batch norm, ReLU, pooling, additions and the loss. v2's
analytic conv/dense counts (`spec.flops`) must equal what this measures.

By default the module runs on the `meta` device: shapes propagate and FlopCounterMode counts, but
nothing is computed, so even ResNet-50 at 224x224 takes well under a second.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from aiperf_runner.spec.graph import Graph

from .builder import build_module

__all__ = ["MeasuredFlops", "measure_module", "measure_graph"]


@dataclass(frozen=True)
class MeasuredFlops:
    """FlopCounterMode totals per image (the batch total divided by the batch size)."""

    forward: int
    backward: int
    batch: int

    @property
    def train(self) -> int:
        return self.forward + self.backward


def measure_module(module: nn.Module, input_shape: tuple[int, ...], batch: int = 2,
                   device: str | torch.device = "meta", copy_module: bool = True) -> MeasuredFlops:
    """Forward and backward FlopCounterMode counts of `module` on a batch of `input_shape` (C, H, W).

    The module is copied to `device` (the caller's module is left alone unless `copy_module=False`:
    then it is moved and its gradients are filled) and run in training mode;
    the input does not require a gradient (as a real batch), the backward starts from `out.sum()`.
    Counts are per image: the batch total divided by `batch` (exact: conv and matmul counts are
    linear in the batch size). The default batch is 2 because training-mode batch norm refuses a
    single value per channel (batch 1 on a 1x1 feature map).
    """
    if batch < 1:
        raise ValueError("batch must be >= 1")
    dev = torch.device(device)
    mod = (copy.deepcopy(module) if copy_module else module).to(dev)
    mod.train()
    x = torch.randn((batch, *input_shape), device=dev)
    with FlopCounterMode(display=False) as fwd_counter:
        y = mod(x)
    with FlopCounterMode(display=False) as bwd_counter:
        y.sum().backward()
    fwd, bwd = int(fwd_counter.get_total_flops()), int(bwd_counter.get_total_flops())
    if fwd % batch or bwd % batch:  # pragma: no cover - would mean a non-linear count
        raise RuntimeError(f"FLOP counts {fwd}, {bwd} not divisible by batch {batch}")
    return MeasuredFlops(fwd // batch, bwd // batch, batch)


def measure_graph(graph: Graph, batch: int = 2, device: str | torch.device = "meta",
                  num_classes: int | None = None, dropout: float = 0.0) -> MeasuredFlops:
    """Build `graph` with `build_module` and measure it on its own input shape."""
    dev = torch.device(device)
    with torch.device(dev):  # on meta: no parameter memory is allocated at all
        module = build_module(graph, num_classes=num_classes, dropout=dropout)
    return measure_module(module, tuple(graph.input_shape), batch=batch, device=dev, copy_module=False)
