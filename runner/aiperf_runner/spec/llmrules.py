"""AIPerf-LLM's presets and rules (`llm-v1`): what a run of `--workload llm` trains, the gate its best model
must pass, and its score. Torch-free: the verifier (spec/llmverify.py) and the runner read the same facts.

- **Presets** (`LLM_PRESETS`): the data set, the seed transformer, each trial's budget in optimizer steps, the
  search's size bounds, the default duration, and the validation-loss gate. A byte preset (`llm-smoke`,
  `llm-kjv`) binds its text by the SHA-256 of its training and validation bytes. A shard preset (`llm`,
  `llm-bytes`) trains on pre-tokenised shards the site stages itself (data/llmshards.py): it cannot pin the
  SHA-256 of a corpus this project does not ship, so it binds the shards' format, the tokenizer and its
  vocabulary, the tokens the frozen evaluation reads and the least training tokens (`LlmShardBinding`), and the
  run records the manifest's digest, which every trial and the audit check the shards against.
- **Growth tolerance**: a child trial starts from its parent's weights grown by function-preserving
  morphisms; the grown model's logits on a fixed probe batch (the first `PROBE_SEQUENCES` windows of the
  validation text) may differ from the parent's by at most `GROWTH_TOLERANCE` (float rounding of widened
  sums; an inserted block is bit-exact).
- **Score**: FLOPs of every token trained in a finished trial (spec.llmflops, rules llm-v1) over the run's
  time, as for images. **Regulated score**: score x |ln(1 - exp(-L))|, L the best validation loss in nats
  per byte (per token for a shard preset): exp(-L) is the geometric mean of the probability the model gives
  the true next byte (token), the language model's counterpart of the image workload's accuracy
  (docs/score.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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

REEXECUTE_TOLERANCE: dict[str, float] = {"fp32": 0.005, "bf16": 0.2}
"""Largest ratio ||replayed - claimed|| / ||claimed - start|| (L2 over all parameters) of an honest trial's
re-execution (train/llm/reexecute.py: the whole trial trained again from the start its log binds, in fp32 on the
audit's CPU), by the run's precision (run.json `precision`: fp32 on a CPU, bf16 autocast on CUDA). Measured on this
project's busy 2-core machine by `python bench/llm_reexecute_tolerance.py` (llm-smoke, 40 steps, and llm-kjv, 150;
a seed trial and a child of two growths each; the search's default hyper-parameters, 2,048-token batches):

    honest fp32 (world 1 and 2, 1 and 2 threads), same CPU:  0, bit-identical, every one (12 smoke, 6 kjv)
    honest fp32 re-executed in float64 (another CPU's fp32):  max 1.7e-6 (smoke), 1.8e-5 (kjv)
    honest bf16 (CPU autocast for a GPU's), re-executed fp32: max 0.0045 (smoke), 0.108 (kjv)
    a smaller Budget, 1/10, 1/2, 9/10 of the steps:            min 33.4, 1.92, 0.165 (smoke); 8.53, 0.712, 0.147 (kjv)
    the first 1/10, 1/2, 9/10 of the steps only:               min 18.1, 0.656, 0.0347 (smoke); 3.79, 0.308, 0.0395 (kjv)

fp32: 0.005, 280x the float64 bound and 7x under the least forgery (a trainer stopped at 9/10). bf16: its honest
figures overlap the forged ones at 9/10 (0.108 honest against 0.035 stopped and 0.147 with a 9/10 Budget) and grow
with the trial's length, so it has its own, 0.2: 1.85x the worst honest figure, 1.5x under the least half-trained
one (0.308). A bf16 trial that skipped half its steps fails; one that skipped a tenth may pass. A GPU's kernels and
the `llm` preset's 1,000-step trials were not measured (docs/rules.md, "AIPerf-LLM")."""


AUDIT_REEXECUTE_TRIALS = 3
"""How many of a witnessed run's finished trials the service's audit re-executes (leaderboard/llmaudit.py `draw`):
the best trial always (its loss is the one the run is judged by), the others drawn with the service's randomness,
weighted by the FLOPs the log claims for them, among those whose start the log binds (a seed trial, or a child
whose parent's weights and moments are recorded). A run whose trials skipped work in a share f of its claimed
FLOPs escapes two weighted draws with probability about (1 - f)^2: 0.25 for half, 0.81 for a tenth; a run that
skipped work in every trial is caught by the first. A trial re-executes in its own training time on the audit's
CPU (llm-smoke 1 to 3 s, llm-kjv 15 to 60 s), hence a few trials, where the image workload re-executes 17
segments of 16 steps."""


def reexecute_tolerance(precision: str) -> float:
    """The largest ratio an honest trial of a run at `precision` may re-execute to; the loosest for a precision
    REEXECUTE_TOLERANCE does not list."""
    return REEXECUTE_TOLERANCE.get(precision, max(REEXECUTE_TOLERANCE.values()))


def audited_precision(claimed: str | None, accelerators: int) -> str:
    """The precision a run's trials are re-executed and judged at: the one its run.json claims only where the system
    it is judged on (the registered one) has accelerators, since the trainer's bf16 is CUDA's autocast; fp32
    otherwise, so that a CPU run claiming bf16 is not given bf16's looser REEXECUTE_TOLERANCE."""
    return str(claimed or "fp32") if accelerators > 0 else "fp32"


def trial_seed(run_seed: int, trial: str) -> int:
    """A trial's seed from the run's seed and the trial's number (`t0007`): the controller gives it to the trial
    (run/llmrun.py) and a re-execution derives it again (train/llm/reexecute.py)."""
    return run_seed * 100_003 + int(trial[1:])


class LlmPresetError(AiperfError, ValueError):
    """An unknown AIPerf-LLM preset."""


SHARD_FORMAT = "aiperf-llm-shards/1"
"""The shard presets' data: llm.c's token shards (a 256 x int32 header, magic 20240520, version 1, the token count;
then uint16 tokens) and the manifest `aiperf-llm-shards.json` (data/llmshards.py)."""
_HEX = frozenset("0123456789abcdef")


def _count(value: Any) -> int | None:
    """A count from run.json: a non-negative int (never a bool, never a float), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True)
class LlmShardBinding:
    """What a shard preset binds of its data, since it cannot bind the corpus's SHA-256: the format, the tokenizer
    and its vocabulary, `eval_tokens` (the frozen evaluation reads the first `eval_tokens` tokens of the validation
    split, which must hold at least as many) and `min_train_tokens`."""

    tokenizer: str
    vocab: int
    eval_tokens: int
    min_train_tokens: int
    format: str = SHARD_FORMAT

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "tokenizer": self.tokenizer, "vocab": self.vocab,
                "eval_tokens": self.eval_tokens, "min_train_tokens": self.min_train_tokens}

    def problems(self, data: Mapping[str, Any]) -> list[str]:
        """What of a `dataset` block (run.json's, or a manifest's facts with this binding) differs from the
        binding: format, tokenizer, vocabulary, the evaluation's tokens, too few validation or training tokens,
        a digest that is not 64 lower-case hex digits. Empty: it agrees."""
        out = [f"dataset {key} {data.get(key)!r} is not the preset's {want!r}"
               for key, want in (("format", self.format), ("tokenizer", self.tokenizer), ("vocab", self.vocab),
                                 ("eval_tokens", self.eval_tokens)) if data.get(key) != want]
        val, train = _count(data.get("val_tokens")), _count(data.get("train_tokens"))
        if val is None or val < self.eval_tokens:
            out.append(f"dataset val_tokens {data.get('val_tokens')!r}: the preset's evaluation reads "
                       f"{self.eval_tokens:,} validation tokens")
        if train is None or train < self.min_train_tokens:
            out.append(f"dataset train_tokens {data.get('train_tokens')!r}: the preset needs at least "
                       f"{self.min_train_tokens:,} training tokens")
        digest = data.get("digest")
        if not (isinstance(digest, str) and len(digest) == 64 and set(digest) <= _HEX):
            out.append(f"dataset digest {digest!r} is not a manifest's SHA-256 (64 lower-case hex digits)")
        return out


@dataclass(frozen=True)
class LlmPreset:
    """One preset of `--workload llm`; `loss_gate` is in nats per byte (per token for a shard preset) of the frozen
    evaluation. A byte preset binds `train_bytes`, `val_bytes`, `train_sha256`, `val_sha256` (None for a shard
    preset); a shard preset has its `shards` binding instead. `seed_lr`: the learning rate of the hyper-parameter
    search's seed point when not the search's default (search/llmhparams.py)."""

    name: str
    data: str
    train_bytes: int | None
    val_bytes: int | None
    train_sha256: str | None
    val_sha256: str | None
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
    shards: LlmShardBinding | None = None
    seed_lr: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The preset's part of run.json's `dataset` block (a shard run adds its manifest's facts to it)."""
        if self.shards is not None:
            return {"name": self.name, "data": self.data, **self.shards.to_json(),
                    "seed_arch": self.seed_arch.to_dict(), "steps_per_trial": self.steps_per_trial,
                    "loss_gate": self.loss_gate, "floor_nats": self.floor_nats}
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
    # The production preset: pre-tokenised web text (e.g. FineWeb or FineWeb-Edu tokenised with GPT-2's BPE by
    # llm.c's dev/data/fineweb.py), staged by the site (`stage --workload llm --manifest DIR`), for GPU clusters.
    "llm": LlmPreset(
        name="llm",
        data="shards/gpt2",
        train_bytes=None, val_bytes=None, train_sha256=None, val_sha256=None,
        shards=LlmShardBinding(tokenizer="gpt2", vocab=50257, eval_tokens=10_485_760,
                               min_train_tokens=1_000_000_000),
        # GPT-2 small's shape (12 blocks, 12 heads x 64, d_model 768, context 1024) in this decoder's terms:
        # SwiGLU's three matrices of 2048 hold what GPT-2's two of 3072 hold; the head is untied (162 M parameters).
        seed_arch=LlmArch(vocab=50257, d_model=768, seq_len=1024, layers=(LlmLayer(12, 64, 2048),) * 12),
        steps_per_trial=1000,
        loss_gate=4.5,
        default_duration_s=3600.0,
        min_duration_s=3600.0,
        max_layers=24, max_mlp_hidden=6144, max_heads_per_layer=16,
        batch_tokens=(65536, 131072, 262144),
        floor_nats=None,
        seed_lr=6e-4,
        gate_reason="in nats per GPT-2 token, not per byte; provisional, not measured: no reference run could be "
                    "made where this preset was written (no GPU, no corpus). Set from published figures: a GPT-2 "
                    "(124M) model trained by llm.c's trainer reaches 3.28 nats per token on FineWeb's validation "
                    "shard after 10B tokens (llm.c; modded-nanogpt's README), and a uniform guess over 50,257 "
                    "tokens scores 10.82; 4.5 is meant to be passed by a run whose best lineage of trials trained a "
                    "few hundred million tokens (an expectation, not a measurement). To be replaced, as the other "
                    "presets' gates were set, by the worst best loss of reference runs plus a margin",
    ),
    # The same data path (shards, manifest, --data) with the byte-level tokenizer: `stage --workload llm --data
    # TEXT` makes its shards from any text, so the path can be tried on a CPU with nothing downloaded.
    "llm-bytes": LlmPreset(
        name="llm-bytes",
        data="shards/bytes",
        train_bytes=None, val_bytes=None, train_sha256=None, val_sha256=None,
        shards=LlmShardBinding(tokenizer="bytes", vocab=256, eval_tokens=65_536, min_train_tokens=131_072),
        seed_arch=LlmArch(vocab=256, d_model=64, seq_len=64, layers=(LlmLayer(2, 16, 128),) * 2),
        steps_per_trial=40,
        loss_gate=4.0,
        default_duration_s=120.0,
        min_duration_s=60.0,
        max_layers=6, max_mlp_hidden=512, max_heads_per_layer=8,
        batch_tokens=(1024, 2048, 4096),
        floor_nats=None,
        gate_reason="a trial form on whatever text the site staged, so no reference run can set it: 4.0 is 1.55 "
                    "nats under a uniform guess over 256 bytes (5.55), so a model that learned nothing fails it; "
                    "an English text's byte frequencies alone score about 3 (llm-kjv's 3.13), so passing it says "
                    "little. Never an official preset",
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
