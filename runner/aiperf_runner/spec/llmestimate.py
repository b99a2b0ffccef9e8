"""What to expect of an AIPerf-LLM run before it starts: a score range, the trials a slot finishes, a slots split.

Expected score = the slots' counted FLOPs over the run's time. A slot runs trials back to back: each pays a
start-up, trains the preset's steps at a batch the search picks, then the frozen evaluation reads the preset's
validation tokens (forward only: 1/3 of a trained token's FLOPs); only finished trials count, so the trial under
way when the run ends is lost. The rate comes from a published throughput of the production preset's seed shape
(`LLM_REFERENCES`), as an efficiency (score / peak) with its source. Torch-free, like all of `spec/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import peaks
from .estimate import MIN_TRIALS_PER_SLOT, STAGE_BYTES_PER_S, STARTUP_S, about_minutes, machine, nodes_per_slot
from .llmflops import train_flops_per_token
from .llmrules import LlmPreset, llm_preset

SHARD_TOKEN_BYTES = 2
"""A token of the shard format on disk (uint16; spec/llmrules.py SHARD_FORMAT)."""


@dataclass(frozen=True)
class LlmReference:
    """A published training throughput of a model of the preset's seed shape, as an efficiency."""

    what: str
    source: str
    tokens: float  # tokens trained
    seconds: float  # in this time
    devices: int
    accelerator: str  # model name as peaks.lookup reads it
    precision: str
    low_share: float  # the low end of the range, as a share of the reference efficiency
    low_reason: str

    def efficiency(self, train_flops_per_token: float) -> float:
        peak = peaks.accelerator_peak(self.accelerator, self.precision, self.devices)
        assert peak is not None, f"{self.accelerator} is not in the peak table"
        return self.tokens * train_flops_per_token / self.seconds / peak


LLM_REFERENCES: dict[str, LlmReference] = {
    "llm": LlmReference(
        what="GPT-2 (124M), the llm preset's seed shape (12 blocks of 12 heads x 64, d_model 768, context 1,024), "
             "trained by llm.c (hand-written C/CUDA, bf16) on one node of 8x A100 80GB SXM",
        source="Karpathy, 'Reproducing GPT-2 (124M) in llm.c in 90 minutes for $20' (github.com/karpathy/llm.c, "
               "discussion 481, May 2024): 10B FineWeb tokens in about 90 minutes",
        tokens=10e9, seconds=90 * 60, devices=8, accelerator="NVIDIA A100 80GB", precision="bf16",
        low_share=0.3,
        low_reason="not measured: no GPU run of this runner's AIPerf-LLM trainer has been made yet. Its trainer is "
                   "eager PyTorch (scaled_dot_product_attention, DDP, bf16 autocast, no torch.compile), where "
                   "llm.c's kernels are fused by hand; a PyTorch reproduction of the same model with torch.compile "
                   "and flash attention reports 1.1M tokens/s on 8x A100 SXM4 (about 0.6 of llm.c's rate)",
    ),
}
"""Per preset. The seed of `llm` has GPT-2 small's matrix multiplies exactly (its SwiGLU's three matrices of 2,048
hold what GPT-2's two of 3,072 hold, and the head is untied, as GPT-2's tied head is still a matmul), so the
reference's tokens carry the seed's llm-v1 FLOPs. llm.c's run is an upper bound for the search's trials."""


def eval_tokens(preset: LlmPreset) -> int:
    """Tokens the frozen evaluation reads at the end of every trial: the shard binding's, else the validation
    split's bytes (a byte preset evaluates all of it)."""
    return preset.shards.eval_tokens if preset.shards is not None else int(preset.val_bytes or 0)


def slot_trials(duration_s: float, trial_s: float) -> int:
    """Trials one slot finishes in the run, each `trial_s` long (start-up, training and evaluation)."""
    return int(duration_s // trial_s) if trial_s > 0 else 0


def _split(nodes: int, node_rate: float, trial_flops: float, duration_s: float, startup_s: float) -> dict[str, Any]:
    """The smallest power-of-two nodes per slot with which a slot finishes MIN_TRIALS_PER_SLOT trials of the
    seed (node_rate: one node's expected FLOP/s; linear DDP scaling assumed)."""
    k, trial_s, trials = nodes_per_slot(nodes, lambda k: startup_s + trial_flops / (k * node_rate), duration_s)
    train_share = 1 - startup_s / trial_s
    if trials >= MIN_TRIALS_PER_SLOT and k == 1:
        reason = (f"one node per slot: a trial of the seed takes about {trial_s / 60:.1f} min on one node "
                  f"({train_share:.0%} of it training and evaluating, the rest start-up), so each slot finishes "
                  f"about {trials:.0f} in the run; more nodes per slot would shorten the trials, so that start-up "
                  "takes a larger share, and search fewer architectures at once")
    elif trials >= MIN_TRIALS_PER_SLOT:
        reason = (f"{k} nodes per slot: a trial of the seed would take too long on one node for a slot to finish "
                  f"{MIN_TRIALS_PER_SLOT:.0f} in the run; on {k} nodes about {trial_s / 60:.1f} min (assuming DDP "
                  "scales linearly across nodes, which is optimistic)")
    else:
        reason = (f"the run is too short for this machine: even with {k} node(s) per slot a trial of the seed takes "
                  f"about {trial_s / 60:.1f} min, so a slot finishes {trials:.1f} and the search barely starts; "
                  "choose a longer --duration")
    return {"nodes_per_slot": k, "slots": nodes // k, "first_round_trial_s": trial_s, "trials_per_slot": trials,
            "reason": reason}


def llm_estimate(*, accelerator_model: str, accelerators_per_node: int, nodes: int, duration_s: float,
                 precision: str, preset: str, startup_s: float = STARTUP_S, data_bytes: float | None = None,
                 stage_bytes_per_s: float = STAGE_BYTES_PER_S) -> dict[str, Any]:
    """The estimate of an AIPerf-LLM run as a JSON-ready dict, with the fields of `estimate.estimate` and
    `workload: "llm"`. Without a reference for `preset` (the CPU presets), no score range."""
    p = llm_preset(preset)  # LlmPresetError names the known ones
    out = machine(accelerator_model=accelerator_model, accelerators_per_node=accelerators_per_node, nodes=nodes,
                  duration_s=duration_s, precision=precision, preset=preset)
    out["workload"] = "llm"
    per_token = train_flops_per_token(p.seed_arch)
    seed_line = (f"the seed model of {preset} trains {per_token.train / 1e9:.3g} GFLOP per token by the "
                 f"{per_token.rules} rules (its matrix multiplies x 3; PaLM's 6N + attention: "
                 f"{per_token.palm / 1e9:.3g}); the search grows it up to {p.max_layers} blocks")
    ref = LLM_REFERENCES.get(preset)
    if ref is None:
        out.update(efficiency=None, score_ops=None, split=None)
        out["assumptions"] += [f"no reference throughput for preset {preset!r} (a preset for a CPU): no score "
                               "range; `aiperf-runner preflight --workload llm` measures this node", seed_line]
        return out
    high = ref.efficiency(per_token.train)
    low = high * ref.low_share
    peak = out["peak_flops"]
    node_peak = peak / nodes
    evaluation = eval_tokens(p) * per_token.forward
    batches = (min(p.batch_tokens), max(p.batch_tokens))

    def trial_flops(batch: int) -> float:
        return p.steps_per_trial * batch * per_token.train + evaluation

    middle = (batches[0] * batches[1]) ** 0.5
    split = _split(nodes, node_peak * (low * high) ** 0.5, trial_flops(round(middle)), duration_s, startup_s)
    scores, trials = [], []
    for eff, batch in ((low, batches[0]), (high, batches[1])):
        trial_s = startup_s + trial_flops(batch) / (split["nodes_per_slot"] * node_peak * eff)
        finished = slot_trials(duration_s, trial_s)
        counted = split["slots"] * finished * p.steps_per_trial * batch * per_token.train
        scores.append(counted / duration_s)
        trials.append(finished)
    trials.sort()  # a smaller batch makes shorter trials: the low end may finish more of them
    if data_bytes is None and p.shards is not None:
        data_bytes = float((p.shards.min_train_tokens + p.shards.eval_tokens) * SHARD_TOKEN_BYTES)
    staging_s = data_bytes / stage_bytes_per_s if data_bytes else None
    out.update(efficiency=[low, high], score_ops=scores, split=split, trials_per_slot=trials, startup_s=startup_s,
               staging_s=staging_s)
    out["assumptions"] += [
        seed_line,
        f"efficiency (FLOPs trained / peak) high end {high:.3f}: {ref.what}; {ref.source}; {ref.tokens:.3g} tokens "
        f"x {per_token.train / 1e9:.3g} GFLOP in {ref.seconds:.0f} s on {ref.devices} x {ref.accelerator} at "
        f"{ref.precision}",
        f"low end {low:.3f} ({ref.low_share:g} x the high end): {ref.low_reason}",
        "the efficiency carries over to other accelerators, precisions and the grown models in proportion to the "
        "peak (an assumption: a grown model trains more FLOPs a token at about the seed's rate)",
        f"a trial: {startup_s:.0f} s from its launch to its first step (not counted), {p.steps_per_trial:,} steps "
        f"of {batches[0]:,} tokens at the low end, {batches[1]:,} at the high end (the search picks among "
        f"{', '.join(f'{b:,}' for b in p.batch_tokens)}), then the frozen evaluation of {eval_tokens(p):,} tokens "
        "(not counted); only finished trials count, so the one under way at the end of the run is lost: about "
        f"{trials[0]} to {trials[1]} trials a slot",
    ]
    if duration_s < p.min_duration_s:
        out["assumptions"].append(f"the run is shorter than {preset}'s minimum of {p.min_duration_s:.0f} s: its "
                                  "result would fail validity.duration")
    if staging_s is not None and data_bytes:
        least = "" if p.shards is None else f", at least: the preset binds {p.shards.min_train_tokens:,} training tokens"
        out["assumptions"].append(
            f"staging ({data_bytes / 1e9:.1f} GB of token shards{least}; on every node at once, "
            f"{stage_bytes_per_s / 1e6:.0f} MB/s a node): {about_minutes(staging_s)} before the run, never on its "
            "clock or in its score")
    return out
