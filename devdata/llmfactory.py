"""Synthetic AIPerf-LLM run directories: run.json and a hash-chained events.jsonl as the controller writes them
(run/llmrun.py), for a machine, a preset and a duration (docs/internals.md, "Run directory").

`make_llm_run(path, plan, machine, witness)` plays a search out on the machine's slots: the preset's seed
first, then children of the best finished trials grown by real growths (spec/llmgrowth.py, inside the preset's
size bounds), each trial the preset's steps of a batch TPE could pick, trained in the time its FLOPs (the rules'
count, spec/llmflops.py) take at the plan's share of its slot's peak plus a start-up; trials still running when
the duration is over are cancelled. Losses fall along a lineage towards the plan's `best_loss`. With a
`TestWitness` the log carries a run token and a witnessed heartbeat every interval. Nothing here trains or
imports torch: what it writes is what `spec.verify` checks, so the demo data's AIPerf-LLM reports are real
verifications of these runs (devdata/reports.py `llm_report`).
"""

from __future__ import annotations

import heapq
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiperf_runner.spec import SPEC_VERSION
from aiperf_runner.spec.llmflops import LlmArch, LlmArchError, train_flops_per_token
from aiperf_runner.spec.llmgrowth import apply_growth, llm_arch_hash
from aiperf_runner.spec.llmrules import RULES, WORKLOAD, LlmPreset, llm_preset

from devdata.runfactory import ChainWriter, TestWitness

RUNNER_VERSION = "0.1.0"
START = 1_764_000_000.0


@dataclass(frozen=True)
class LlmMachine:
    """The hardware a factory run says it ran on; `device_peak`: one accelerator's FLOP/s at the run's precision."""

    accelerator_model: str
    accelerator_count: int
    nodes: int
    cpu_model: str
    cpu_cores: int
    device_peak: float
    system_id: int | None = None


@dataclass(frozen=True)
class LlmPlan:
    """What the run does: `efficiency` is the share of its slot's peak a trial of the preset's seed trains at (a
    grown model a little more), `overhead_s` a trial's start-up and evaluation, `best_loss` the validation loss
    the best lineage approaches, `first_loss` the seed trial's."""

    preset: str
    slots: int
    devices_per_slot: int
    duration_s: float
    efficiency: float
    overhead_s: float
    best_loss: float
    first_loss: float
    precision: str = "bf16"
    seed: int = 1
    start: float = START
    data_digest: str = "0" * 64


@dataclass
class LlmFactoryRun:
    run_id: str
    trials: int = 0
    finished: int = 0
    cancelled: int = 0
    growths: dict[str, int] = field(default_factory=dict)
    events: int = 0
    end: float = 0.0


@dataclass
class _Trial:
    name: str
    arch: LlmArch
    parent: str | None
    growths: list[dict[str, Any]]
    batch: int
    lineage_tokens: int
    loss: float | None = None
    ended: float | None = None


def dataset_of(preset: LlmPreset, digest: str) -> dict[str, Any]:
    """run.json's `dataset` block for the preset (a shard preset: a manifest of just enough tokens)."""
    block = preset.to_json()
    if preset.shards is not None:
        block.update(val_tokens=preset.shards.eval_tokens, train_tokens=preset.shards.min_train_tokens * 10,
                     digest=digest)
    return block


def run_json(plan: LlmPlan, machine: LlmMachine, run_id: str) -> dict[str, Any]:
    """run.json as run/llmstartup.py writes it (the machine described by `machine`)."""
    preset = llm_preset(plan.preset)
    system: dict[str, Any] = {
        "nodes": machine.nodes, "cpu_model": machine.cpu_model, "cpu_cores": machine.cpu_cores,
        "accelerators": [{"model": machine.accelerator_model, "memory_bytes": 0}] * machine.accelerator_count,
        "accelerator_model": machine.accelerator_model, "accelerator_count": machine.accelerator_count,
        "torch": "synthetic", "cuda": "synthetic"}
    if machine.system_id is not None:
        system["id"] = machine.system_id
    return {
        "workload": WORKLOAD, "run_id": run_id, "preset": preset.name, "rules": RULES, "slots": plan.slots,
        "devices_per_slot": plan.devices_per_slot, "duration_s": plan.duration_s, "seed": plan.seed,
        "max_retries": 1, "runner_version": RUNNER_VERSION, "spec_version": SPEC_VERSION,
        "dataset": dataset_of(preset, plan.data_digest), "device_type": "cuda", "precision": plan.precision,
        "system": system, "declared_peak_flops": {plan.precision: machine.device_peak * machine.accelerator_count},
        "declared_peak_source": {plan.precision: "table"}, "created_at": plan.start - 5.0,
        "config": {"slots": plan.slots, "devices_per_slot": plan.devices_per_slot, "duration_s": plan.duration_s,
                   "backend": "slurm", "backend_options": {}},
    }


class _Search:
    """Children of the best finished trials, grown inside the preset's bounds; losses along a lineage."""

    def __init__(self, preset: LlmPreset, plan: LlmPlan, device_peak: float, rng: random.Random) -> None:
        self.preset, self.plan, self.device_peak, self.rng = preset, plan, device_peak, rng
        self.seed_flops = train_flops_per_token(preset.seed_arch, RULES).train
        seed_tokens = preset.steps_per_trial * self.median_batch
        # Tokens along a lineage by which the loss has come most of the way down: a tenth of what the longest
        # lineage of seed-sized trials could train in the run (a lineage of the best trials is about half that).
        seed_seconds = self.seconds(preset.seed_arch, self.median_batch) + plan.overhead_s
        self.scale = max(seed_tokens, plan.duration_s / seed_seconds * seed_tokens / 10)

    @property
    def median_batch(self) -> int:
        batches = self.preset.batch_tokens
        return batches[len(batches) // 2]

    def seconds(self, arch: LlmArch, batch: int) -> float:
        """Training time of a trial of `arch`: its FLOPs at the plan's share of the slot's peak (larger models a
        little closer to the peak, as they are on accelerators)."""
        flops = train_flops_per_token(arch, RULES).train * batch * self.preset.steps_per_trial
        size = flops / (self.seed_flops * batch * self.preset.steps_per_trial)
        share = min(self.plan.efficiency * size ** 0.1, 0.8)
        return flops / (self.plan.devices_per_slot * self.device_peak * share)

    def propose(self, name: str, finished: list[_Trial]) -> _Trial:
        rng = self.rng
        batch = rng.choice(self.preset.batch_tokens)
        if not finished:
            return _Trial(name, self.preset.seed_arch, None, [], batch, 0)
        best = sorted(finished, key=lambda t: t.loss or math.inf)[:4]
        parent = rng.choice(best)
        arch, growths = parent.arch, []
        for _ in range(rng.choice((1, 1, 2))):
            growth = self.growth(arch)
            if growth is not None:
                arch = apply_growth(arch, growth)
                growths.append(growth)
        if not growths:  # the parent is as large as the bounds allow: train it again under new hyper-parameters
            return _Trial(name, self.preset.seed_arch, None, [], batch, 0)
        return _Trial(name, arch, parent.name, growths, batch, parent.lineage_tokens)

    def growth(self, arch: LlmArch) -> dict[str, Any] | None:
        rng, p = self.rng, self.preset
        for kind in rng.sample(("insert_block", "widen_mlp", "add_heads"), 3):
            i = rng.randrange(len(arch.layers))
            layer = arch.layers[i]
            if kind == "insert_block" and len(arch.layers) < p.max_layers:
                g: dict[str, Any] = {"kind": kind, "index": rng.randint(0, len(arch.layers)), "layer": layer.to_dict()}
            elif kind == "widen_mlp" and layer.mlp_hidden < p.max_mlp_hidden:
                wider = min(p.max_mlp_hidden, layer.mlp_hidden * rng.choice((5, 6, 8)) // 4 // 64 * 64 or 64)
                if wider <= layer.mlp_hidden:
                    continue
                g = {"kind": kind, "layer": i, "new_hidden": wider}
            elif kind == "add_heads" and layer.heads < p.max_heads_per_layer:
                g = {"kind": kind, "layer": i, "n": min(rng.choice((1, 2)), p.max_heads_per_layer - layer.heads)}
            else:
                continue
            try:
                apply_growth(arch, g)
            except LlmArchError:
                continue
            return g
        return None

    def loss(self, trial: _Trial) -> float:
        plan, rng = self.plan, self.rng
        tokens = trial.lineage_tokens + self.preset.steps_per_trial * trial.batch
        first = self.preset.steps_per_trial * self.median_batch
        gain = math.exp(-max(tokens - first, 0) / self.scale)
        return round(plan.best_loss + (plan.first_loss - plan.best_loss) * gain + abs(rng.gauss(0, 0.01)), 6)


def make_llm_run(path: str | Path, plan: LlmPlan, machine: LlmMachine, witness: TestWitness | None = None,
                 run_id: str | None = None) -> LlmFactoryRun:
    """Write the run directory `path` (created) of `plan` on `machine`; what it holds (counts)."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(plan.seed)
    preset = llm_preset(plan.preset)
    run = run_json(plan, machine, run_id or f"{rng.getrandbits(128):032x}")
    (root / "run.json").write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")
    out = LlmFactoryRun(run["run_id"])
    search = _Search(preset, plan, machine.device_peak, rng)
    end = plan.start + plan.duration_s
    lines: list[tuple[float, int, str, dict[str, Any]]] = []
    order = 0

    def line(t: float, kind: str, **fields: Any) -> None:
        nonlocal order
        lines.append((t, order, kind, fields))
        order += 1

    # Slots free up in time order; a proposal takes its parent among the trials finished by then. The seed
    # trains first, on slot 0; the other slots wait for it, since every other trial grows from a finished one.
    free = [(plan.start + 2.0, 0)]
    idle = list(range(1, plan.slots))
    done: list[_Trial] = []
    while free:
        t, slot = heapq.heappop(free)
        if t >= end - 1.0:
            continue
        finished = [x for x in done if x.ended is not None and x.ended <= t]
        out.trials += 1
        trial = search.propose(f"t{out.trials:04d}", finished)
        hp = {"lr": round(rng.uniform(3e-4, 3e-3), 6), "warmup_steps": rng.randint(0, 100),
              "weight_decay": round(rng.uniform(0.01, 0.3), 4), "batch_tokens": trial.batch}
        line(t, "trial_proposed", trial=trial.name, arch=trial.arch.to_dict(), arch_hash=llm_arch_hash(trial.arch),
             parent=trial.parent, growths=trial.growths, hparams=hp, hparam_source="tpe" if trial.parent else "seed",
             round=(out.trials - 1) // plan.slots, steps=preset.steps_per_trial)
        began = t + 0.2
        line(began, "trial_started", trial=trial.name, attempt=1, slot=slot, devices=plan.devices_per_slot)
        train_start = began + plan.overhead_s * rng.uniform(0.6, 0.9)
        train_end = train_start + search.seconds(trial.arch, trial.batch) * rng.uniform(1.0, 1.08)
        stop = train_end + plan.overhead_s * rng.uniform(0.1, 0.3)
        if stop >= end:
            line(end, "trial_cancelled", trial=trial.name, attempt=1, reason="the run's duration is over")
            out.cancelled += 1
            continue
        trial.loss, trial.ended = search.loss(trial), stop + 0.05
        tokens = preset.steps_per_trial * trial.batch
        line(stop, "train_end", trial=trial.name, attempt=1, steps=preset.steps_per_trial, tokens_trained=tokens,
             flops=train_flops_per_token(trial.arch, RULES).train * tokens, val_loss=trial.loss,
             train_loss=round(trial.loss * 0.985, 6), started_at=train_start, ended_at=train_end,
             growth_gap=_gap(trial.growths, rng), growths=[g["kind"] for g in trial.growths],
             world=plan.devices_per_slot)
        line(trial.ended, "trial_finished", trial=trial.name, attempt=1, val_loss=trial.loss,
             weights_sha256=f"{rng.getrandbits(256):064x}", optimizer_sha256=f"{rng.getrandbits(256):064x}")
        trial.lineage_tokens += tokens
        done.append(trial)
        out.finished += 1
        for g in trial.growths:
            out.growths[g["kind"]] = out.growths.get(g["kind"], 0) + 1
        for k, waiting in enumerate([slot, *idle]):
            heapq.heappush(free, (trial.ended + 0.1 + 0.01 * k, waiting))
        idle = []
    lines.sort()
    _write(root, run, plan, lines, end, witness, out)
    return out


def _gap(growths: list[dict[str, Any]], rng: random.Random) -> float | None:
    """The logits' change a growth makes on the probe batch: none inserted (bit-exact), float rounding widened."""
    if not growths:
        return None
    if all(g["kind"] == "insert_block" for g in growths):
        return 0.0
    return rng.uniform(2e-7, 3e-5)


def _write(root: Path, run: dict[str, Any], plan: LlmPlan, lines: list[tuple[float, int, str, dict[str, Any]]],
           end: float, witness: TestWitness | None, out: LlmFactoryRun) -> None:
    started: dict[str, Any] = {
        "run_id": run["run_id"], "workload": WORKLOAD, "preset": plan.preset, "rules": RULES, "slots": plan.slots,
        "devices_per_slot": plan.devices_per_slot, "runner_version": RUNNER_VERSION, "spec_version": SPEC_VERSION,
        "dataset": run["dataset"], "device_type": "cuda"}
    if witness is not None:
        started["token"] = witness.token(run, issued_at=plan.start - 3.0)
    records = 0
    with ChainWriter(root / "events.jsonl") as log:
        log.append("run_started", plan.start, **started)
        beats = witness.beats(log, run["run_id"], plan.start) if witness is not None else None
        last = plan.start
        for t, _, kind, fields in lines:
            if beats is not None:
                t = max(t, beats.until(t, records))
            t = max(t, last)
            log.append(kind, t, **fields)
            last = t
            records += kind == "train_end"
        if beats is not None:
            beats.until(end, records)
        out.end = max(end, last) + 0.5
        log.append("run_finished", out.end, reason="duration")
        if beats is not None:
            beats.beat(out.end + 0.5, records)  # the last witnessed heartbeat, after run_finished
        out.events = log.seq


__all__ = ["LlmFactoryRun", "LlmMachine", "LlmPlan", "dataset_of", "make_llm_run", "run_json"]
