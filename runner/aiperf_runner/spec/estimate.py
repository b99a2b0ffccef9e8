"""What to expect of a run before it starts: node-hours, a score range and a slots split.

Expected score = the system's peak (`peaks.py`) x an efficiency range (score / peak) x the share of
the run that ends in counted epochs. The efficiency range comes from the preset's reference
measurement (`REFERENCES`), each with its source and what is assumed about it; the caller passes
the FLOPs per image of the preset's seed architecture (computed with `flops.py`), so that nothing
here is a hard-coded score. Torch-free, like all of `spec/`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import peaks
from .presetfacts import get as get_preset

MIN_TRIALS_PER_SLOT = 2.0
"""A slot should finish at least this many first-round trials, so that the search sees results
(and proposes children of them) before the run ends."""


@dataclass(frozen=True)
class Reference:
    """A published training throughput of the preset's seed architecture, as an efficiency."""

    what: str
    source: str
    seconds: float  # time to train
    epochs: float  # epochs trained in that time (an assumption where the source does not say)
    devices: int
    accelerator: str  # model name as peaks.lookup reads it
    precision: str
    low_share: float  # the low end of the range, as a share of the reference efficiency
    low_reason: str

    def efficiency(self, train_images: int, train_flops: float) -> float:
        peak = peaks.accelerator_peak(self.accelerator, self.precision, self.devices)
        assert peak is not None, f"{self.accelerator} is not in the peak table"
        return self.epochs * train_images * train_flops / self.seconds / peak


REFERENCES: dict[str, Reference] = {
    "imagenet": Reference(
        what="ResNet-50 v1.5 (the imagenet seed) trained on 8x H100-SXM5-80GB, mixed precision",
        source="MLPerf Training v3.0, closed division, MLPerf-ID 3.0-2053: 13.466 min to 75.9% top-1 "
               "(developer.nvidia.com/deep-learning-performance-training-inference/training)",
        seconds=13.466 * 60, epochs=35, devices=8, accelerator="NVIDIA H100 SXM", precision="bf16",
        low_share=0.25,
        low_reason="not measured: no GPU run of this runner's trainer has been published yet. A quarter of the "
                   "reference allows for JPEG decoding on the CPUs with the default decoder (MLPerf uses DALI on "
                   "the GPUs; AIPERF_DATA_DECODER=device decodes there, not yet measured on a GPU either), "
                   "untuned batch sizes (64-256) and architectures the search grows or shrinks",
    ),
}
"""Per preset. MLPerf results give a time, not an epoch count: ~35 epochs is typical of its ResNet-50
submissions (LARS, large batches) and is an assumption. The high end is the reference itself: a
hand-tuned MLPerf pipeline is an upper bound for a search whose trials use the PyTorch trainer."""


def epoch_flops(preset: str, train_flops: float, eval_flops: float) -> float:
    spec = get_preset(preset)
    if spec is None or spec.train_images is None or spec.val_images is None:
        raise ValueError(f"preset {preset!r} has no fixed data set size")
    return spec.train_images * train_flops + spec.val_images * eval_flops


STARTUP_S = 90.0
"""Seconds from a trial attempt's launch to its first training step on a GPU node, when not measured: a
SLURM job, about nine Python processes importing torch, CUDA and NCCL start-up, loader workers, cuDNN
autotuning (1-3 minutes, estimated; `aiperf-runner preflight` measures the parts one node pays)."""

DATA_BYTES = {"imagenet": 144e9}
"""The presets' data set on disk (ILSVRC2012's training and validation JPEGs), for the staging time."""

STAGE_BYTES_PER_S = 500e6
"""What `aiperf-runner stage` writes per second on a node (its local NVMe, reading the parallel file system),
when not given: every node stages at once, so the machine's staging takes one node's time."""


MEASURED_LOW_SHARE = 0.5
MEASURED_LOW_REASON = ("trials start cold (torch, CUDA and NCCL, data-loader workers), validate and checkpoint, and "
                       "the search grows or shrinks the seed: none of it is in these measurements, and half the "
                       "measured rate allows for it")


def measured_score_range(node_images_per_s: float, train_flops_per_image: float, nodes: int) -> list[float]:
    """`preflight`'s score range: a node's measured training rate x the seed's FLOPs per trained image x the
    nodes (linear scaling assumed), from MEASURED_LOW_SHARE of that to all of it."""
    high = node_images_per_s * train_flops_per_image * nodes
    return [high * MEASURED_LOW_SHARE, high]


def slot_trials(duration_s: float, epoch_s: float, budgets: tuple[int, ...], startup_s: float) -> tuple[int, float]:
    """(trial attempts one slot starts in the run, the share of its time spent in counted epochs): the k-th trial
    trains budgets[min(k, last)] epochs after `startup_s`; the epoch under way at the end is not counted (half an
    epoch on average), and neither is any start-up."""
    t, trials = 0.0, 0
    while t < duration_s:
        t += startup_s + budgets[min(trials, len(budgets) - 1)] * epoch_s
        trials += 1
    lost = min(duration_s, trials * startup_s + 0.5 * epoch_s)
    return trials, max(0.0, 1 - lost / duration_s)


def nodes_per_slot(nodes: int, trial_s_on: Callable[[int], float], duration_s: float) -> tuple[int, float, float]:
    """(k, trial_s, trials per slot): the smallest power-of-two k nodes per slot with which a slot finishes
    MIN_TRIALS_PER_SLOT trials of `trial_s_on(k)` seconds each, or the largest k the machine allows."""
    k = 1
    while True:
        trial_s = trial_s_on(k)
        trials = duration_s / trial_s
        if trials >= MIN_TRIALS_PER_SLOT or k * 2 > nodes:
            return k, trial_s, trials
        k *= 2


def _split(nodes: int, node_flops: float, epoch: float, first_budget: int, duration_s: float,
           startup_s: float = 0.0) -> dict[str, Any]:
    """The smallest power-of-two nodes per slot with which a slot finishes MIN_TRIALS_PER_SLOT
    first-round trials (node_flops: one node's expected FLOP/s; linear DDP scaling assumed)."""
    k, trial_s, trials = nodes_per_slot(nodes, lambda k: startup_s + first_budget * epoch / (k * node_flops),
                                        duration_s)
    one_node_trial_s = startup_s + first_budget * epoch / node_flops
    if k == 1 and trials >= MIN_TRIALS_PER_SLOT:
        reason = (f"one node per slot: a first-round trial ({first_budget} epochs of the seed) takes about "
                  f"{trial_s / 60:.0f} min on one node, so each slot finishes about {trials:.0f} in the run; more nodes per slot would add all-reduce traffic between nodes and search fewer "
                  "architectures at once")
    elif trials >= MIN_TRIALS_PER_SLOT:
        reason = (f"{k} nodes per slot: a first-round trial ({first_budget} epochs) would take about "
                  f"{one_node_trial_s / 3600:.1f} h on one node, too long for the search to see "
                  f"{MIN_TRIALS_PER_SLOT:.0f} results per slot; on {k} nodes about {trial_s / 60:.0f} min "
                  "(assuming DDP scales linearly across nodes, which is optimistic)")
    else:
        reason = (f"the run is too short for this machine: even with {k} node(s) per slot a first-round trial "
                  f"({first_budget} epochs) takes about {trial_s / 3600:.1f} h, so a slot finishes "
                  f"{trials:.1f} trials and the search barely starts; choose a longer --duration")
    return {"nodes_per_slot": k, "slots": nodes // k, "first_round_trial_s": trial_s,
            "trials_per_slot": trials, "reason": reason}


def machine(*, accelerator_model: str, accelerators_per_node: int, nodes: int, duration_s: float, precision: str,
            preset: str) -> dict[str, Any]:
    """The part of an estimate that needs no reference measurement: the machine, its node- and accelerator-hours
    and its peak at `precision`, with the peak's source as the first assumption."""
    acc = peaks.lookup(accelerator_model)
    if acc is None:
        raise ValueError(f"accelerator {accelerator_model!r} is not in the peak table (spec/peaks.py); known: "
                         + ", ".join(a.name for a in peaks.ACCELERATORS))
    if nodes < 1 or accelerators_per_node < 1 or duration_s <= 0:
        raise ValueError("--nodes and --accelerators-per-node must be at least 1, --duration positive")
    devices = nodes * accelerators_per_node
    device_peak = acc.peak_flops(precision)
    out: dict[str, Any] = {
        "accelerator": acc.name, "accelerators_per_node": accelerators_per_node, "nodes": nodes,
        "accelerators": devices, "duration_s": duration_s, "precision": precision, "preset": preset,
        "node_hours": nodes * duration_s / 3600, "accelerator_hours": devices * duration_s / 3600,
        "peak_flops": device_peak * devices,
        "assumptions": [f"peak: {devices} x {device_peak / 1e12:g} TFLOP/s {precision} dense ({acc.note})"],
    }
    if precision in acc.fallback:
        out["assumptions"].append(f"{acc.name} has no {precision} unit: it runs at the FP32 rate")
    return out


def about_minutes(seconds: float) -> str:
    """A staging time as the estimate prints it."""
    return "under a minute" if seconds < 60 else f"about {seconds / 60:.0f} min"


def measured_mfu(rate: float, flops_per_unit: float, device_peak: float | None) -> float | None:
    """`preflight`'s model FLOPs utilisation: one device's measured rate (images or tokens a second) x the FLOPs
    the rules count per unit, over that device's peak; None without a peak."""
    return rate * flops_per_unit / device_peak if device_peak else None


def estimate(*, accelerator_model: str, accelerators_per_node: int, nodes: int, duration_s: float,
             precision: str, preset: str, train_flops: float, eval_flops: float,
             first_budget: int, budgets: tuple[int, ...] | None = None, startup_s: float = STARTUP_S,
             data_bytes: float | None = None, stage_bytes_per_s: float = STAGE_BYTES_PER_S) -> dict[str, Any]:
    """The estimate as a JSON-ready dict (see `aiperf-runner estimate --json`). `budgets`: the epochs of a slot's
    trials by round (the preset's; default: `first_budget` throughout); `startup_s`: each attempt's launch to
    first step; `data_bytes` (default: the preset's, `DATA_BYTES`) staged at `stage_bytes_per_s` per node."""
    budgets = budgets or (first_budget,)
    out = machine(accelerator_model=accelerator_model, accelerators_per_node=accelerators_per_node, nodes=nodes,
                  duration_s=duration_s, precision=precision, preset=preset)
    peak = out["peak_flops"]
    node_peak = peak / nodes
    ref = REFERENCES.get(preset)
    spec = get_preset(preset)
    if ref is None or spec is None or spec.train_images is None:
        out["assumptions"].append(f"no reference measurement for preset {preset!r}: no score range")
        out.update(efficiency=None, score_ops=None, split=None)
        return out
    high = ref.efficiency(spec.train_images, train_flops)
    low = high * ref.low_share
    epoch = epoch_flops(preset, train_flops, eval_flops)
    split = _split(nodes, node_peak * (low * high) ** 0.5, epoch, first_budget, duration_s, startup_s)
    scores, trials = [], []
    for eff in (low, high):
        epoch_s = epoch / (split["nodes_per_slot"] * node_peak * eff)
        started, counted = slot_trials(duration_s, epoch_s, budgets, startup_s)
        scores.append(peak * eff * counted)
        trials.append(started)
    data_bytes = DATA_BYTES.get(preset) if data_bytes is None else data_bytes
    staging_s = data_bytes / stage_bytes_per_s if data_bytes else None
    out.update(efficiency=[low, high], score_ops=scores, split=split, trials_per_slot=trials, startup_s=startup_s,
               staging_s=staging_s)
    out["assumptions"] += [
        f"efficiency (score / peak) high end {high:.3f}: {ref.what}; {ref.source}; {ref.epochs:g} epochs of "
        f"{spec.train_images:,} images x {train_flops / 1e9:.2f} GFLOP (v2 FLOPs of the seed per trained "
        f"image) in {ref.seconds:.0f} s on {ref.devices} x {ref.accelerator} at {ref.precision}",
        f"low end {low:.3f} ({ref.low_share:g} x the high end): {ref.low_reason}",
        "the efficiency carries over to other accelerators and precisions in proportion to their peak "
        "(an assumption: memory bandwidth and the CPUs feeding the data do not scale with it)",
        "slots run all the time (utilisation ~100%, as measured in docs/running.md); the epoch each slot has "
        "under way when the run ends is not counted (half an epoch per slot on average)",
        f"each trial attempt spends {startup_s:.0f} s from its launch to its first step, not counted (cold "
        "processes, CUDA and NCCL, loaders; `aiperf-runner preflight` measures one node's part); a slot's "
        f"trials train {', '.join(map(str, budgets))} epochs by round: about {trials[0]} to {trials[1]} "
        "trials a slot",
    ]
    if staging_s is not None and data_bytes:
        out["assumptions"].append(
            f"staging ({data_bytes / 1e9:.0f} GB packed on every node at once, {stage_bytes_per_s / 1e6:.0f} MB/s "
            f"a node): about {staging_s / 60:.0f} min before the run, never on its clock or in its score")
    return out
