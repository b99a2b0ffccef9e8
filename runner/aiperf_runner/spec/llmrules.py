"""AIPerf-LLM's presets and rules (`llm-v1`): what a run of `--workload llm` trains, the gate its best model
must pass, and its score. Torch-free: the verifier (spec/llmverify.py) and the runner read the same facts.

- **Presets** (`LLM_PRESETS`): the data set (bound by SHA-256), the seed transformer, each trial's budget in
  optimizer steps, the search's size bounds, the default duration, and the validation-loss gate.
- **Growth tolerance**: a child trial starts from its parent's weights grown by function-preserving
  morphisms; the grown model's logits on a fixed probe batch (the first `PROBE_SEQUENCES` windows of the
  validation text) may differ from the parent's by at most `GROWTH_TOLERANCE` (float rounding of widened
  sums; an inserted block is bit-exact).
- **Score**: FLOPs of every token trained in a finished trial (spec.llmflops, rules llm-v1) over the run's
  time, as for images. **Regulated score**: score x |ln(1 - exp(-L))|, L the best validation loss in nats
  per byte: exp(-L) is the geometric mean of the probability the model gives the true next byte, the
  language model's counterpart of the image workload's accuracy (docs/score.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .errors import AiperfError
from .llmflops import DEFAULT_LLM_RULES, LlmArch, LlmLayer

WORKLOAD = "llm"
GROWTH_TOLERANCE = 1e-4
"""Largest absolute difference of logits a growth may make on the probe batch."""
PROBE_SEQUENCES = 8
AUDIT_LOSS_TOLERANCE = 0.01
"""Largest difference, in nats per byte, between a challenged trial's logged validation loss and the loss the
service's audit re-evaluates from its weights (fp32 on the CPU: train/llm/reevaluate.py). Measured on this
project's busy 2-core machine (bench/llm_audit_tolerance.py: llm-smoke's seed trained 40 and 300 steps,
llm-kjv's 150, a 4-block model of 1024-wide MLPs 80): the CPU against itself is identical on 1 and 2 threads
and within 1.1e-7 over batch compositions (1, 7, 64 windows: what a data-parallel trainer's split changes);
the trainer's evaluation under bf16 autocast (CPU autocast standing in for a GPU trainer's) is 9e-6 to 2.1e-4
above fp32. A GPU's kernels round differently again and were not measured (no GPU lent), hence a bound 50x
the largest bf16 difference seen. It is still small where it matters: at the losses the presets reach and gate
(1.0 to 1.75 nats) the regulated score moves 1.1 to 1.3 % per 0.01 nats (the relative slope of
|ln(1 - e^-L)|), less than identical runs differ (the presets' five reference runs: best losses 1.018 to 1.147
on llm-smoke, 1.452 to 1.470 on llm-kjv)."""


class LlmPresetError(AiperfError, ValueError):
    """An unknown AIPerf-LLM preset."""


@dataclass(frozen=True)
class LlmPreset:
    """One preset of `--workload llm`; `loss_gate` is in nats per byte of the frozen evaluation."""

    name: str
    data: str
    train_bytes: int
    val_bytes: int
    train_sha256: str
    val_sha256: str
    seed_arch: LlmArch
    steps_per_trial: int
    loss_gate: float
    default_duration_s: float
    min_duration_s: float
    max_layers: int
    max_mlp_hidden: int
    max_heads_per_layer: int
    batch_tokens: tuple[int, ...] = (2048, 4096, 8192)
    floor_nats: float | None = None
    gate_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "data": self.data, "train_bytes": self.train_bytes, "val_bytes": self.val_bytes,
                "train_sha256": self.train_sha256, "val_sha256": self.val_sha256,
                "seed_arch": self.seed_arch.to_dict(), "steps_per_trial": self.steps_per_trial,
                "loss_gate": self.loss_gate, "floor_nats": self.floor_nats}


LLM_PRESETS: dict[str, LlmPreset] = {
    "llm-smoke": LlmPreset(
        name="llm-smoke",
        data="llm-smoke/seed0/order2",
        train_bytes=1 << 20, val_bytes=100_000,
        train_sha256="e643f97899271c61eb21a90a969636225967cd0d959fa4e7e130833fa6aa3db4",
        val_sha256="a21f49bd2f67f3d97480cc2753c3d0f11b83a729dd5c692217462187591966fa",
        seed_arch=LlmArch(vocab=256, d_model=64, seq_len=64, layers=(LlmLayer(2, 16, 128),) * 2),
        steps_per_trial=40,
        loss_gate=1.4,
        default_duration_s=120.0,
        min_duration_s=60.0,
        max_layers=6, max_mlp_hidden=512, max_heads_per_layer=8,
        batch_tokens=(1024, 2048, 4096),
        floor_nats=0.9960308533224402,
        gate_reason="the worst of five reference runs (2 minutes, 2 slots on 2 CPU cores: 1.018 to 1.147 nats, "
                    "bench/llm_gate.py) plus 0.25; the text's floor is 0.996, a model of byte frequencies "
                    "scores 3.45",
    ),
    "llm-kjv": LlmPreset(
        name="llm-kjv",
        data="kjv/bible-kjv-text",
        train_bytes=4_184_192, val_bytes=220_220,
        train_sha256="a84c3a87f348d1da80b5c42b5b7339bec2eaf33138b5dbdb0a8ff1a45753a5e5",
        val_sha256="4b09eef2c31ab17b22205f8b1759057bae532f8e4c2d4df3e1bd67082e710251",
        seed_arch=LlmArch(vocab=256, d_model=128, seq_len=128, layers=(LlmLayer(4, 32, 256),) * 2),
        steps_per_trial=150,
        loss_gate=1.75,
        default_duration_s=300.0,
        min_duration_s=150.0,
        max_layers=6, max_mlp_hidden=1024, max_heads_per_layer=8,
        batch_tokens=(2048, 4096, 8192),
        floor_nats=None,
        gate_reason="the worst of five reference runs (5 minutes, 2 slots on 2 CPU cores: 1.452 to 1.470 nats, "
                    "bench/llm_gate.py) plus 0.25, rounded up to 0.05; a model of byte frequencies scores 3.13 "
                    "on the validation text, one of byte pairs 2.41",
    ),
}


def llm_preset(name: str) -> LlmPreset:
    try:
        return LLM_PRESETS[name]
    except KeyError:
        raise LlmPresetError(f"unknown AIPerf-LLM preset {name!r} (known: {', '.join(LLM_PRESETS)})") from None


def is_llm(run: Any) -> bool:
    """Whether run.json (or run_started) declares the LLM workload."""
    return isinstance(run, dict) and run.get("workload") == WORKLOAD


def loss_factor(loss: float) -> float:
    """|ln(1 - exp(-loss))|: the regulated score's quality factor for a validation loss in nats (0 when none)."""
    if not math.isfinite(loss) or loss <= 0:
        return 0.0
    return abs(math.log1p(-math.exp(-loss)))


def score_ops(flops: int, seconds: float) -> float:
    """FLOPs trained per second of the run."""
    return flops / seconds if seconds > 0 else 0.0


def regulated_score_ops(score: float, best_loss: float | None) -> float:
    return score * loss_factor(best_loss) if best_loss is not None else 0.0


RULES = DEFAULT_LLM_RULES
