"""Function-preserving growth of the LLM (`model.LlmModel`), and the optimizer state carried over.

Each morphism returns a `Growth`: a new model, its architecture, and the `mapping` from the new model's
parameters to the old ones it inherits. The grown model computes exactly the parent's function at the
moment of growth, because the only new weights that write into the residual stream start at zero:

- `insert_block(model, arch, index)`: a new block whose attention output projection (`attn.o`) and MLP
  output matrix (`mlp.down`) are zero: x + 0 + 0, the block is the identity (Staged Training, Shen et al.
  2022; Masked Structural Growth, Yao et al. 2023; Net2Net's deeper identity).
- `widen_mlp(model, arch, layer, new_hidden)`: new SwiGLU hidden units (rows of `gate` and `up`) whose
  columns of `down` are zero (Net2Net's wider, bert2BERT, with a zero output instead of a split).
- `add_heads(model, arch, layer, n)`: new heads (rows of q, k, v) whose columns of `attn.o` are zero.
  Softmax is per head, so the old heads' attention is untouched.

Inherited weights are copied; the new input-side weights (q, k, v, gate, up and the new block's norms'
gains, 1) are drawn as a fresh model's are, normal(0, std): non-zero so that the new units differ from
each other and receive a gradient. The zero matrices receive a gradient at the first step (their input is
not zero); the input-side weights receive theirs once the zero matrix has moved, from the second step.
Exactness: with zero weights the added terms are exact zeros, so `insert_block` is bit-exact; widening
adds zero terms inside a matmul's sums, which a BLAS may regroup (differences at the last bit).

Widening d_model is not offered: RMSNorm divides each token's features by their root-mean-square over
d_model, so new residual features, even zero ones, change the normalisation of the existing features
(by sqrt(d_new/d_old) for zero ones); keeping the function exact would need rescaled gains and norms that
stop being RMSNorm. The issue asks for d_model growth only where it can be kept exact; it cannot, here.

`carry_optimizer_state` moves an AdamW's moments (exp_avg, exp_avg_sq, max_exp_avg_sq) and step count
to the inherited slices of the new parameters, zeros elsewhere; wholly new parameters start fresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from aiperf_runner.spec.llmflops import LlmArch, LlmArchError, LlmLayer

from .model import INIT_STD, LlmModel, build_model

__all__ = ["Growth", "ParamMap", "add_heads", "carry_optimizer_state", "function_gap", "insert_block",
           "widen_mlp"]

Region = tuple[slice, ...]
ParamMap = dict[str, tuple[str, Region]]
"""new parameter name -> (old parameter name, the region of the new parameter holding the old values).
A new parameter that is not a key is wholly new."""


@dataclass(frozen=True)
class Growth:
    """A grown model, its architecture, and where it holds its parent's parameters."""

    kind: str
    model: LlmModel
    arch: LlmArch
    mapping: ParamMap


def _check(model: LlmModel, arch: LlmArch) -> None:
    if model.arch != arch:
        raise ValueError("the model was not built from this architecture")


def _full(p: torch.Tensor) -> Region:
    return tuple(slice(0, n) for n in p.shape)


def _identity_map(model: nn.Module, rename: dict[str, str] | None = None) -> ParamMap:
    """Every parameter of `model` inherited whole, under its own name or `rename`'s prefix substitution."""
    out: ParamMap = {}
    for name, p in model.named_parameters():
        new = name
        for old_prefix, new_prefix in (rename or {}).items():
            if name.startswith(old_prefix):
                new = new_prefix + name[len(old_prefix):]
                break
        out[new] = (name, _full(p))
    return out


def _grow(kind: str, model: LlmModel, arch: LlmArch, mapping: ParamMap, zero: Mapping[str, Region],
          generator: torch.Generator | None, std: float) -> Growth:
    """A fresh model of `arch` (random, like the parent's own init), the inherited values copied in,
    then the residual writers' new regions (`zero`) set to zero."""
    ref = next(model.parameters())
    grown = build_model(arch, std=std, generator=generator, device=ref.device, dtype=ref.dtype)
    old = dict(model.named_parameters())
    new = dict(grown.named_parameters())
    with torch.no_grad():
        for name, (src, region) in mapping.items():
            new[name][region].copy_(old[src])
        for name, region in zero.items():
            new[name][region].zero_()
    grown.train(model.training)
    return Growth(kind, grown, arch, mapping)


def insert_block(model: LlmModel, arch: LlmArch, index: int, layer: LlmLayer | None = None, *,
                 generator: torch.Generator | None = None, std: float = INIT_STD) -> Growth:
    """A new block before block `index` (== number of blocks: after the last), the identity at first.

    Its shape is `layer`, by default that of the block it follows (block 0's when inserted first).
    """
    _check(model, arch)
    n = len(arch.layers)
    if not 0 <= index <= n:
        raise LlmArchError(f"insert index {index} outside 0..{n}")
    layer = arch.layers[max(index - 1, 0)] if layer is None else layer
    new_arch = arch.with_inserted(index, layer)
    rename = {f"blocks.{j}.": f"blocks.{j + 1}." for j in range(index, n)}
    mapping = _identity_map(model, rename)
    zero = {f"blocks.{index}.attn.o.weight": (slice(None),), f"blocks.{index}.mlp.down.weight": (slice(None),)}
    return _grow("insert_block", model, new_arch, mapping, zero, generator, std)


def widen_mlp(model: LlmModel, arch: LlmArch, layer: int, new_hidden: int, *,
              generator: torch.Generator | None = None, std: float = INIT_STD) -> Growth:
    """Block `layer`'s MLP widened to `new_hidden` units; the new units' `down` columns are zero."""
    _check(model, arch)
    old = arch.layers[layer]
    if new_hidden <= old.mlp_hidden:
        raise LlmArchError(f"layer {layer}: new_hidden {new_hidden} must exceed mlp_hidden {old.mlp_hidden}")
    new_arch = arch.with_layer(layer, LlmLayer(old.heads, old.head_dim, new_hidden))
    h, d = old.mlp_hidden, arch.d_model
    mapping = _identity_map(model)
    p = f"blocks.{layer}.mlp."
    mapping[p + "gate.weight"] = (p + "gate.weight", (slice(0, h), slice(0, d)))
    mapping[p + "up.weight"] = (p + "up.weight", (slice(0, h), slice(0, d)))
    mapping[p + "down.weight"] = (p + "down.weight", (slice(0, d), slice(0, h)))
    zero = {p + "down.weight": (slice(None), slice(h, new_hidden))}
    return _grow("widen_mlp", model, new_arch, mapping, zero, generator, std)


def add_heads(model: LlmModel, arch: LlmArch, layer: int, n: int, *,
              generator: torch.Generator | None = None, std: float = INIT_STD) -> Growth:
    """`n` heads (of the layer's head_dim) appended to block `layer`; their columns of `attn.o` are zero."""
    _check(model, arch)
    if n < 1:
        raise LlmArchError(f"layer {layer}: add at least one head, got {n}")
    old = arch.layers[layer]
    new_layer = LlmLayer(old.heads + n, old.head_dim, old.mlp_hidden)
    new_arch = arch.with_layer(layer, new_layer)
    a, d = old.attn_dim, arch.d_model
    mapping = _identity_map(model)
    p = f"blocks.{layer}.attn."
    for m in ("q", "k", "v"):
        mapping[p + m + ".weight"] = (p + m + ".weight", (slice(0, a), slice(0, d)))
    mapping[p + "o.weight"] = (p + "o.weight", (slice(0, d), slice(0, a)))
    zero = {p + "o.weight": (slice(None), slice(a, new_layer.attn_dim))}
    return _grow("add_heads", model, new_arch, mapping, zero, generator, std)


@torch.no_grad()
def function_gap(old: nn.Module, new: nn.Module, tokens: torch.Tensor) -> float:
    """Largest absolute difference of the two models' logits on `tokens` (0 for an exact growth)."""
    modes = old.training, new.training
    old.eval()
    new.eval()
    try:
        return float((old(tokens) - new(tokens)).abs().max())
    finally:
        old.train(modes[0])
        new.train(modes[1])


def carry_optimizer_state(old_model: nn.Module, new_model: nn.Module, old_opt: torch.optim.Optimizer,
                          new_opt: torch.optim.Optimizer, mapping: ParamMap) -> int:
    """Put `old_opt`'s per-parameter state (AdamW's exp_avg, exp_avg_sq, step) into `new_opt`.

    A state tensor shaped like its parameter goes to the inherited region of a zero tensor; anything
    else (the step count) is copied. New slices of an inherited parameter thus share its step count with
    zero moments: AdamW's first updates there are larger than a fresh parameter's (up to
    (1 - beta1) / sqrt(1 - beta2), about 3.2x with the default betas), which the warm-up after a growth
    absorbs. Wholly new parameters get no state: AdamW starts them as it starts any parameter.
    Returns how many parameters received a state.
    """
    owned = {id(p) for g in new_opt.param_groups for p in g["params"]}
    old_params = dict(old_model.named_parameters())
    carried = 0
    for name, p in new_model.named_parameters():
        if name not in mapping:
            continue
        if id(p) not in owned:
            raise ValueError(f"parameter {name} of the new model is not in the new optimizer")
        src, region = mapping[name]
        old_state = old_opt.state.get(old_params[src])
        if not old_state:  # the old optimizer never stepped this parameter
            continue
        new_opt.state[p] = {key: _carry(value, old_params[src], p, region) for key, value in old_state.items()}
        carried += 1
    return carried


def _carry(value: object, old_p: torch.Tensor, new_p: torch.Tensor, region: Region) -> object:
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape == old_p.shape:
        out = torch.zeros_like(new_p, dtype=value.dtype)
        out[region] = value
        return out
    return value.clone() if isinstance(value, torch.Tensor) else value
