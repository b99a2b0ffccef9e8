"""spec/llmflops.py: AIPerf-LLM's architecture and FLOP rules, by hand on a tiny model (no torch)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap

import pytest
from aiperf_runner.spec.llmflops import (
    DEFAULT_LLM_RULES,
    LLM_RULES,
    LlmArch,
    LlmArchError,
    LlmLayer,
    causal_pairs,
    forward_flops_per_sequence,
    palm_flops_per_token,
    param_counts,
    train_flops,
    train_flops_per_token,
)

from tests.helpers import REPO

# vocab 16, d_model 8, seq_len 4; one block of 2 heads x 4 features (A = 8), SwiGLU of 12 units.
TINY = LlmArch(vocab=16, d_model=8, seq_len=4, layers=(LlmLayer(heads=2, head_dim=4, mlp_hidden=12),))


def random_arch(rng: random.Random) -> LlmArch:
    layers = tuple(LlmLayer(rng.randint(1, 4), 2 * rng.randint(2, 8), rng.randint(8, 64))
                   for _ in range(rng.randint(1, 4)))
    return LlmArch(rng.randint(16, 97), rng.randint(8, 64), rng.randint(4, 32), layers)


def test_tiny_forward_by_hand() -> None:
    f = forward_flops_per_sequence(TINY)
    (b,) = f.per_layer
    assert f.tokens == 4 and f.rules == DEFAULT_LLM_RULES == LLM_RULES[0]
    assert b.qkv == 3 * 2 * 4 * 8 * 8 == 1536          # 3 x (T x d) @ (d x A)
    assert b.attn_out == 2 * 4 * 8 * 8 == 512           # (T x A) @ (A x d)
    assert b.attn_scores == b.attn_values == 2 * 8 * 10 == 160  # 10 = 4*5/2 causal pairs, 2*A FLOP each
    assert b.attn_scores_dense == b.attn_values_dense == 2 * 8 * 16 == 256
    assert b.mlp == 3 * 2 * 4 * 8 * 12 == 2304          # gate, up, down
    assert f.head == 2 * 4 * 8 * 16 == 1024
    assert f.causal == 1536 + 512 + 160 + 160 + 2304 + 1024 == 5696
    assert f.dense == 5696 + 2 * (256 - 160) == 5888


def test_tiny_per_token_and_palm_by_hand() -> None:
    p = param_counts(TINY)
    assert (p.embedding, p.matmul, p.norms) == (128, 4 * 64 + 3 * 96 + 128, 3 * 8) == (128, 672, 24)
    t = train_flops_per_token(TINY)
    assert t.forward == 5696 // 4 == 1424
    assert t.train == 3 * 1424 == 4272
    assert t.non_embedding_params == 696
    assert t.palm == 6 * 696 + 12 * 1 * 2 * 4 * 4 == 4560   # 6N + 12 L H Q T
    assert json.loads(json.dumps(t.to_json()))["train_flops_per_token"] == 4272


def test_causal_pairs_and_partial_sequences() -> None:
    assert [causal_pairs(t) for t in (1, 2, 3, 4)] == [1, 3, 6, 10]
    one = forward_flops_per_sequence(TINY, tokens=1)
    assert one.causal == one.dense  # a single token attends only to itself
    three = forward_flops_per_sequence(TINY, tokens=3)
    assert three.per_layer[0].attn_scores == 2 * 8 * 6
    with pytest.raises(ValueError):
        forward_flops_per_sequence(TINY, tokens=5)      # longer than seq_len
    with pytest.raises(ValueError):
        forward_flops_per_sequence(TINY, tokens=0)


def test_train_is_three_forwards_of_the_real_tokens() -> None:
    per_seq = {t: forward_flops_per_sequence(TINY, tokens=t).causal for t in (1, 3, 4)}
    # a batch of a full sequence, one of 3 real tokens and one of padding only
    assert train_flops(TINY, [4, 3, 0, 1]) == 3 * (per_seq[4] + per_seq[3] + per_seq[1])
    assert train_flops(TINY, []) == 0


@pytest.mark.parametrize("seed", range(20))
def test_causal_dense_and_palm_identities(seed: int) -> None:
    arch = random_arch(random.Random(seed))
    t = arch.seq_len
    f = forward_flops_per_sequence(arch)
    attn = sum(x.attn_dim for x in arch.layers)
    # the masked upper triangle: T(T-1)/2 pairs, 2*A FLOP each for QK^T and again for AV
    assert f.dense - f.causal == 4 * attn * t * (t - 1) // 2
    tok = train_flops_per_token(arch)
    assert tok.train * t == 3 * f.causal
    # PaLM's figure counts the norm gains and dense attention; the difference is exactly that
    assert tok.palm - tok.train == 6 * param_counts(arch).norms + 6 * (t - 1) * attn
    assert palm_flops_per_token(arch) == tok.palm


def test_arch_round_trips_through_json() -> None:
    arch = random_arch(random.Random(7))
    d = json.loads(json.dumps(arch.to_dict()))
    assert LlmArch.from_dict(d) == arch
    assert hash(LlmArch.from_dict(d)) == hash(arch)
    assert LlmArch(16, 8, 4, [LlmLayer(2, 4, 12)]) == TINY  # a list of layers is kept as a tuple


@pytest.mark.parametrize("d, message", [
    ({"vocab": 0, "d_model": 8, "seq_len": 4, "layers": [{"heads": 1, "head_dim": 4, "mlp_hidden": 8}]}, "vocab"),
    ({"vocab": 16, "d_model": 8.0, "seq_len": 4, "layers": [{"heads": 1, "head_dim": 4, "mlp_hidden": 8}]},
     "d_model"),
    ({"vocab": 16, "d_model": 8, "seq_len": True, "layers": [{"heads": 1, "head_dim": 4, "mlp_hidden": 8}]},
     "seq_len"),
    ({"vocab": 16, "d_model": 8, "seq_len": 4, "layers": []}, "at least one block"),
    ({"vocab": 16, "d_model": 8, "seq_len": 4, "layers": [{"heads": 1, "head_dim": 5, "mlp_hidden": 8}]},
     "layer 0: head_dim must be even"),
    ({"vocab": 16, "d_model": 8, "seq_len": 4, "layers": [{"heads": 1, "head_dim": 4}]}, "missing"),
    ({"vocab": 16, "d_model": 8, "seq_len": 4, "layers": [{"heads": -1, "head_dim": 4, "mlp_hidden": 8}]},
     "layer 0: heads"),
    ({"vocab": 16, "d_model": 8, "seq_len": 4, "layers": [], "bias": True}, "unknown"),
    ({"vocab": 16, "d_model": 8, "layers": []}, "missing"),
])
def test_invalid_architectures_are_refused(d: dict, message: str) -> None:
    with pytest.raises(LlmArchError, match=message):
        LlmArch.from_dict(d)


def test_attention_width_may_differ_from_d_model() -> None:
    arch = LlmArch(16, 8, 4, (LlmLayer(heads=3, head_dim=6, mlp_hidden=8),))   # A = 18 != 8
    assert forward_flops_per_sequence(arch).per_layer[0].qkv == 3 * 2 * 4 * 8 * 18


def test_unknown_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown LLM FLOP rules"):
        forward_flops_per_sequence(TINY, rules="llm-v0")


def test_llmflops_imports_without_torch() -> None:
    # tests/test_spec_imports.py checks all of spec/; this names the module, for whoever reads this file
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {"torch", "numpy", "django"}:
                    raise ImportError(f"blocked: {name}")
        sys.meta_path.insert(0, Block())
        from aiperf_runner.spec.llmflops import LlmArch, LlmLayer, train_flops_per_token
        print(train_flops_per_token(LlmArch(16, 8, 4, [LlmLayer(2, 4, 12)])).train)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4272"
