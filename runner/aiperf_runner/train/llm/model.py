"""The decoder-only transformer of AIPerf-LLM, built from a `spec.llmflops.LlmArch`.

token embedding -> blocks -> RMSNorm -> output head (untied), no biases anywhere. A block, pre-norm:

    x = x + Attention(RMSNorm(x))      # rotary positions on q and k; causal
    x = x + SwiGLU(RMSNorm(x))         # down(silu(gate(x)) * up(x))

Attention is `torch.nn.functional.scaled_dot_product_attention(is_causal=True)`: on a GPU it dispatches to
fused kernels that skip the masked half, so the rules' causal count (spec/llmflops.py) is the work really
done. FlopCounterMode does not see that: it counts the fused kernels densely (T^2 query-key pairs), counts
the math fallback's two batched matmuls densely too (used on the `meta` device, or under
`sdpa_kernel(SDPBackend.MATH)`), and in torch 2.14 counts nothing at all for the CPU flash kernel
(`_scaled_dot_product_flash_attention_for_cpu` has no formula). A measurement is therefore made on `meta`
or with the math backend, where torch's count equals the spec's *dense* figure exactly
(tests/train/test_llm_flops_torch.py); the causal figure is the dense one less the masked pairs.

Every matmul is an `nn.Linear` without bias, so the model's matmul weights are exactly those
`spec.llmflops.param_counts` counts; the names of the modules are what `morph.py` maps between models.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from aiperf_runner.spec.llmflops import LlmArch, LlmLayer

__all__ = ["Attention", "Block", "LlmModel", "SwiGLU", "build_model", "rotary"]

ROPE_BASE = 10000.0
NORM_EPS = 1e-6
INIT_STD = 0.02


def rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of (batch, heads, T, head_dim): feature pair (i, i + head_dim/2) of the
    token at position p rotated by p * base^(-2i/head_dim) (the "rotate half" layout). Elementwise only."""
    t, dim = x.shape[-2], x.shape[-1]
    half = dim // 2
    inv_freq = ROPE_BASE ** (-torch.arange(half, device=x.device, dtype=torch.float64) * 2 / dim)
    angles = torch.arange(t, device=x.device, dtype=torch.float64)[:, None] * inv_freq[None, :]
    # the angles in float64 whatever x's dtype: positions times frequencies lose digits in bf16
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):
    """Causal multi-head attention: d_model -> heads*head_dim (q, k, v) and back (o). Heads are the
    consecutive head_dim-wide slices of q, k and v's outputs, so a new head is rows appended at the end."""

    def __init__(self, d_model: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        width = heads * head_dim
        self.q = nn.Linear(d_model, width, bias=False)
        self.k = nn.Linear(d_model, width, bias=False)
        self.v = nn.Linear(d_model, width, bias=False)
        self.o = nn.Linear(width, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = rotary(split(self.q(x))), rotary(split(self.k(x))), split(self.v(x))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)): three matrices; hidden unit j is row j of gate and up, column j of down."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """Pre-norm block. Only `attn.o` and `mlp.down` write into the residual stream."""

    def __init__(self, d_model: int, layer: LlmLayer) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(d_model, eps=NORM_EPS)
        self.attn = Attention(d_model, layer.heads, layer.head_dim)
        self.mlp_norm = nn.RMSNorm(d_model, eps=NORM_EPS)
        self.mlp = SwiGLU(d_model, layer.mlp_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class LlmModel(nn.Module):
    """tokens (batch, T) int64 -> logits (batch, T, vocab). `arch` is the architecture it was built from."""

    def __init__(self, arch: LlmArch) -> None:
        super().__init__()
        self.arch = arch
        self.embed = nn.Embedding(arch.vocab, arch.d_model)
        self.blocks = nn.ModuleList(Block(arch.d_model, x) for x in arch.layers)
        self.norm = nn.RMSNorm(arch.d_model, eps=NORM_EPS)
        self.head = nn.Linear(arch.d_model, arch.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[-1] > self.arch.seq_len:
            raise ValueError(f"sequence of {tokens.shape[-1]} tokens is longer than seq_len {self.arch.seq_len}")
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def init_weights(model: nn.Module, std: float = INIT_STD, generator: torch.Generator | None = None) -> None:
    """Small normal weights for every matrix and the embedding; RMSNorm gains 1."""
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std, generator=generator)
        elif isinstance(module, nn.RMSNorm) and module.weight is not None:
            nn.init.ones_(module.weight)


def build_model(arch: LlmArch, *, std: float = INIT_STD, generator: torch.Generator | None = None,
                device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> LlmModel:
    """The model of `arch`, initialised (normal(0, std); `generator` makes it reproducible)."""
    arch.validate()
    model = LlmModel(arch)
    if device is not None or dtype is not None:
        model = model.to(device=device, dtype=dtype)
    if not any(p.is_meta for p in model.parameters()):
        init_weights(model, std, generator)
    return model


def num_matmul_params(model: LlmModel) -> int:
    """Parameters of the model's `nn.Linear`s (spec.llmflops.param_counts(arch).matmul)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))

