"""What one node trains of an AIPerf-LLM preset (`aiperf-runner preflight --workload llm`): the preset's seed
model on the node's device, from its construction to its first step, then tokens/s over timed steps, with the
trainer's own step (`trainer.train`: AdamW, the schedule, bf16 autocast on a GPU). The windows are random
tokens drawn on the device, so the figure is the device's, not the data path's (which is a memory read)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from aiperf_runner.spec.llmflops import train_flops_per_token
from aiperf_runner.spec.llmrules import llm_preset

from .trainer import Budget, LlmHparams, new_session, train

DATA_WINDOWS = 256  # random windows of the tokens the timed steps draw from


@dataclass(frozen=True)
class LlmSpeed:
    device: str
    precision: str
    batch_tokens: int
    first_step_s: float  # from the model's construction to its first step done
    tokens_per_s: float  # steady state, one device
    train_flops_per_token: float  # the seed's llm-v1 training FLOPs per token (spec/llmflops.py)


class _RandomTokens:
    """Random token windows of a vocabulary larger than a byte, in memory (the trainer's TokenWindows)."""

    def __init__(self, vocab: int, seq_len: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.tokens = rng.integers(0, vocab, size=(DATA_WINDOWS, seq_len + 1), dtype=np.int64)

    def window_count(self, seq_len: int) -> int:
        return len(self.tokens)

    def windows(self, index: np.ndarray, seq_len: int) -> np.ndarray:
        return self.tokens[index]


def seed_speed(preset: str, device: torch.device, batch_tokens: int, steps: int) -> LlmSpeed:
    """The preset's seed model trained on `device`: its first step timed from the model's construction, then
    `steps` more steps timed on their own; `batch_tokens` per step."""
    arch = llm_preset(preset).seed_arch
    hp = LlmHparams(batch_tokens=batch_tokens, warmup_steps=1)
    data: bytes | _RandomTokens
    if arch.vocab <= 256:
        data = bytes(np.random.default_rng(0).integers(0, 256, size=DATA_WINDOWS * (arch.seq_len + 1), dtype=np.uint8))
    else:
        data = _RandomTokens(arch.vocab, arch.seq_len)
    started = time.perf_counter()
    session = new_session(arch, hp, seed=0, device=device)
    train(session, data, hp, Budget(steps=1), seed=0, device=device)
    first_step_s = time.perf_counter() - started
    timed = train(session, data, hp, Budget(steps=steps), seed=1, device=device)
    precision = "bf16" if device.type == "cuda" else "fp32"  # the trainer's autocast
    return LlmSpeed(str(device), precision, batch_tokens, first_step_s, timed.tokens_per_s,
                    float(train_flops_per_token(arch).train))
