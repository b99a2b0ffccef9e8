"""The LLM FLOP rules (spec/llmflops.py) against torch's FlopCounterMode on 50 random architectures.

FlopCounterMode counts matrix multiplies only, 2 FLOP per multiply-add, and knows nothing of the causal
mask: it counts scaled_dot_product_attention densely (T^2 query-key pairs), both through the fused
kernels' formula and through the math fallback's two batched matmuls. So torch's count must equal the
spec's *dense* figure exactly, block by block; the spec's causal figure is the dense one less the masked
upper triangle, T(T-1)/2 pairs per head at 2*head_dim FLOP each for QK^T and again for AV.

The models run on the `meta` device (shapes only: attention takes the math path there, and the 50 take
about a second). On a real CPU tensor torch 2.14 picks `_scaled_dot_product_flash_attention_for_cpu`,
for which FlopCounterMode has no formula: attention counts 0 there, so a CPU measurement forces the math
backend (`test_cpu_math_backend_counts_the_same`).
"""

from __future__ import annotations

import random

import pytest
import torch
from aiperf_runner.spec.llmflops import LlmArch, LlmLayer, forward_flops_per_sequence, param_counts
from aiperf_runner.train.llm.model import build_model, num_matmul_params
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode


def random_arch(rng: random.Random) -> LlmArch:
    """layers 1-4, heads 1-4, head_dim 4-16 (even: rotary pairs), mlp_hidden 8-64, d_model 8-64,
    vocab 16-97, seq_len 4-32."""
    layers = tuple(LlmLayer(rng.randint(1, 4), 2 * rng.randint(2, 8), rng.randint(8, 64))
                   for _ in range(rng.randint(1, 4)))
    return LlmArch(rng.randint(16, 97), rng.randint(8, 64), rng.randint(4, 32), layers)


def measure(arch: LlmArch, batch: int, tokens: int, device: str = "meta",
            dtype: torch.dtype = torch.float32) -> tuple[dict[str, int], int]:
    """FlopCounterMode's forward counts per module (summed over ops) and its backward total."""
    model = build_model(arch, device=device, dtype=dtype)
    x = torch.randint(0, arch.vocab, (batch, tokens)) if device != "meta" else \
        torch.zeros((batch, tokens), dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as fwd:
        logits = model(x)
    with FlopCounterMode(display=False) as bwd:
        logits.sum().backward()
    per_module = {k.removeprefix("LlmModel."): sum(v.values()) for k, v in fwd.get_flop_counts().items()}
    return per_module, int(bwd.get_total_flops())


def assert_counts_equal(arch: LlmArch, batch: int, tokens: int, counted: dict[str, int], backward: int) -> None:
    spec = forward_flops_per_sequence(arch, tokens=tokens)
    assert counted["Global"] == batch * spec.dense
    for b in spec.per_layer:
        attention = b.qkv + b.attn_out + b.attn_scores_dense + b.attn_values_dense
        assert counted[f"blocks.{b.index}.attn"] == batch * attention, f"block {b.index} attention"
        assert counted[f"blocks.{b.index}.mlp"] == batch * b.mlp, f"block {b.index} MLP"
    assert counted["head"] == batch * spec.head
    # training = 3 x forward: the backward of every matmul is two matmuls of its size
    assert backward == 2 * counted["Global"]
    masked = sum(4 * x.attn_dim * tokens * (tokens - 1) // 2 for x in arch.layers)
    assert spec.causal == spec.dense - masked


@pytest.mark.parametrize("seed", range(50))
def test_spec_equals_flop_counter(seed: int) -> None:
    rng = random.Random(seed)
    arch = random_arch(rng)
    # half the sequences full, half shorter (real tokens of a right-padded sequence)
    tokens = arch.seq_len if seed % 2 else rng.randint(1, arch.seq_len)
    batch = rng.randint(1, 3)
    counted, backward = measure(arch, batch, tokens)
    assert_counts_equal(arch, batch, tokens, counted, backward)


@pytest.mark.parametrize("seed", range(3))
def test_cpu_math_backend_counts_the_same(seed: int) -> None:
    rng = random.Random(1000 + seed)
    arch = random_arch(rng)
    with sdpa_kernel(SDPBackend.MATH):
        counted, backward = measure(arch, 2, arch.seq_len, device="cpu", dtype=torch.float64)
    assert_counts_equal(arch, 2, arch.seq_len, counted, backward)


@pytest.mark.parametrize("seed", range(10))
def test_parameters_are_those_the_spec_counts(seed: int) -> None:
    arch = random_arch(random.Random(seed))
    model = build_model(arch, device="meta")
    p = param_counts(arch)
    assert sum(x.numel() for x in model.parameters()) == p.total
    assert num_matmul_params(model) == p.matmul
    assert model.head.weight is not model.embed.weight  # untied
    assert all(getattr(m, "bias", None) is None for m in model.modules())
