"""Re-execute a whole AIPerf-LLM trial, as the audit's proof of its work (docs/rules.md, "AIPerf-LLM": the trial
re-executed): its start state rebuilt, its logged steps trained again, the replayed final weights compared with
the weights the trial claims.

    python -m aiperf_runner.train.llm.reexecute PLAN.json

An LLM trial is short (llm-smoke 40 steps, llm-kjv 150) and deterministic given its seed: its windows come from
`trainer.rank_generator(seed, rank)` for each of its `world` ranks, its learning rate from its step, and its start
from the preset's seed initialisation (`new_session(arch, hp, seed=...)`) or from its parent's final weights and
AdamW moments grown by its logged growths (`trialmain.build_session`, shared, not copied). So the segment the
image workload's audit re-executes (spec/proof.py, train/segment.py) can here be the whole trial.

PLAN.json (paths relative to the plan's directory unless absolute):

    {"proposal": {...},            the trial's `trial_proposed` line as the verified log has it: trial, arch,
                                   parent, growths, hparams, steps (never the run's trial.json)
     "parent_arch": {...} | null,  the parent's architecture, from the parent's `trial_proposed` line
     "run_seed": 0,                run.json `seed`: the trial's seed is the controller's `trial_seed(run_seed, trial)`
     "world": 1,                   run.json `devices_per_slot`: the ranks the trial trained on
     "preset": "llm-smoke",
     "weights": "t0003/weights.safetensors",                the trial's claimed final weights
     "parent_weights": "...", "parent_optimizer": "...",   a child's parent's weights.safetensors and
                                                            optimizer.safetensors (null for a seed trial)
     "weights_sha256": "...", "parent_weights_sha256": "...", "parent_optimizer_sha256": "...",
                                   optional: the digests the log's `trial_finished` lines recorded; a file with
                                   another is an error
     "precision": "fp32",          run.json `precision`: which tolerance applies (REEXECUTE_TOLERANCE)
     "data": null, "digest": null, a shard preset's corpus (its manifest and training and validation shards) and
                                   the run's `dataset.digest`, as `reevaluate --data/--digest` takes them
     "device": "cpu", "threads": null}

The ranks are emulated in this one process (`trainer.train_as_ranks`): every rank's windows from its own
generator, each rank's gradient alone, the gradients averaged as DDP averages them; on one CPU thread count this
is the gloo run to the bit (tests/train/test_llm_reexecute.py). The verdict is the distance between the replayed
and the claimed weights over the distance the trial moved them, over all parameters:

    ratio = ||replayed - claimed|| / ||claimed - start||     (start: the grown parent, or the seed's init)

A trial that trained fewer steps than it logged lands short of the replay (bench/llm_reexecute_tolerance.py
measures both kinds; spec/llmrules.py REEXECUTE_TOLERANCE). Prints one JSON object: {ratio, equal (bit-identical),
steps, seconds (the replay's training), error, data_error, tolerance, passed}. `error` says why the trial could not
be re-executed for a reason of the site's (weights of another architecture or digest, a growth refused, a batch
the world cannot split); `data_error` why the preset's data cannot be had here (the service's fault, as in
reevaluate.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from aiperf_runner.data import llmshards
from aiperf_runner.data.llmshards import TokenData
from aiperf_runner.data.llmtext import TextData
from aiperf_runner.spec.llmflops import LlmArch
from aiperf_runner.spec.llmrules import LlmPreset, llm_preset, trial_seed
from aiperf_runner.spec.llmrules import reexecute_tolerance as tolerance_for

from ..weights import file_sha256, load_weights
from .model import build_model
from .trainer import LlmHparams, Session, train_as_ranks
from .trialmain import build_session, preset_data

__all__ = ["Plan", "Replayed", "distance_ratio", "main", "reexecute", "replay", "start_session",
           "tolerance_for", "trial_seed"]




@dataclass(frozen=True)
class Plan:
    """What re-executing one trial needs (the module docstring's PLAN.json)."""

    proposal: Mapping[str, Any]
    run_seed: int
    world: int
    preset: str
    weights: Path
    parent_arch: Mapping[str, Any] | None = None
    parent_weights: Path | None = None
    parent_optimizer: Path | None = None
    weights_sha256: str | None = None
    parent_weights_sha256: str | None = None
    parent_optimizer_sha256: str | None = None
    precision: str = "fp32"
    data: Path | None = None
    digest: str | None = None
    device: str = "cpu"
    threads: int | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], base: Path | None = None) -> Plan:
        def path(key: str) -> Path | None:
            value = doc.get(key)
            if value is None:
                return None
            p = Path(value)
            return p if p.is_absolute() or base is None else base / p

        weights = path("weights")
        if weights is None:
            raise ValueError("the plan names no weights")
        return cls(proposal=doc["proposal"], run_seed=int(doc["run_seed"]), world=int(doc["world"]),
                   preset=str(doc["preset"]), weights=weights, parent_arch=doc.get("parent_arch"),
                   parent_weights=path("parent_weights"), parent_optimizer=path("parent_optimizer"),
                   weights_sha256=doc.get("weights_sha256"), parent_weights_sha256=doc.get("parent_weights_sha256"),
                   parent_optimizer_sha256=doc.get("parent_optimizer_sha256"),
                   precision=str(doc.get("precision") or "fp32"), data=path("data"), digest=doc.get("digest"),
                   device=str(doc.get("device") or "cpu"), threads=doc.get("threads"))

    def spec(self) -> dict[str, Any]:
        """The trial as trialmain.build_session reads it, every field from the log."""
        p = self.proposal
        return {"trial": p["trial"], "preset": self.preset, "arch": p["arch"], "parent": p.get("parent"),
                "parent_arch": self.parent_arch, "growths": list(p.get("growths") or []), "hparams": p["hparams"],
                "steps": int(p["steps"]), "seed": trial_seed(self.run_seed, str(p["trial"])), "world": self.world}


def training_data(preset: LlmPreset, data: Path | None = None, digest: str | None = None) -> TextData | TokenData:
    """The preset's training and validation data as the trial had them: the text the runner makes (checked against
    the preset's digests), or the shards at `data`, every one re-hashed against a manifest that must be the run's
    (`digest`). ValueError when they cannot be had here."""
    if preset.shards is None:
        return preset_data(preset)
    if data is None:
        raise ValueError(f"{preset.name}: its shards are not on this machine: give the plan's data (the corpus's "
                         f"{llmshards.MANIFEST}, its training and validation shards)")
    llmshards.verify(data, full=True)
    return llmshards.open_for_preset(data, preset, digest)


def _parameters(session: Session) -> dict[str, torch.Tensor]:
    return {name: p.detach().to("cpu", torch.float64, copy=True) for name, p in session.model.named_parameters()}


def distance_ratio(replayed: Mapping[str, torch.Tensor], claimed: Mapping[str, torch.Tensor],
                   start: Mapping[str, torch.Tensor]) -> float:
    """||replayed - claimed|| / ||claimed - start|| over every tensor of `start` (the parameters; L2, float64); inf
    when the claimed weights never moved from the start and the replay did."""
    num = den = 0.0
    for name, s in start.items():
        c = claimed[name].to(torch.float64)
        num += float((replayed[name].to(torch.float64) - c).pow(2).sum())
        den += float((c - s.to(torch.float64)).pow(2).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return math.sqrt(num / den)


@dataclass(frozen=True)
class Replayed:
    """A trial trained again: its start parameters (float64, CPU), its final state (CPU) and the training's
    seconds."""

    start: dict[str, torch.Tensor]
    final: dict[str, torch.Tensor]
    seconds: float

    def ratio(self, claimed: Mapping[str, torch.Tensor]) -> float:
        return distance_ratio(self.final, claimed, self.start)

    def equal(self, claimed: Mapping[str, torch.Tensor]) -> bool:
        return self.final.keys() == claimed.keys() and all(torch.equal(v, claimed[k]) for k, v in self.final.items())


def start_session(plan: Plan, data: TextData | TokenData) -> Session:
    """The trial's start state as its trial program built it (trialmain.build_session): the seed's initialisation,
    or the parent's weights and moments (the plan's files) grown by the logged growths, each checked."""
    spec = plan.spec()
    parent = None
    if spec["parent"] is not None:
        if plan.parent_weights is None or plan.parent_optimizer is None or spec["parent_arch"] is None:
            raise ValueError(f"a child of {spec['parent']}: the plan needs its parent's arch, weights and optimizer")
        parent = (plan.parent_weights, plan.parent_optimizer)
    session, _ = build_session(spec, parent, data, LlmHparams(**spec["hparams"]), torch.device(plan.device))
    return session


def replay(plan: Plan, data: TextData | TokenData | None = None) -> Replayed:
    """The trial of `plan` trained again for its logged steps, as its `world` ranks trained it (`train_as_ranks`).
    `data`: the preset's (`training_data`), made here when not given."""
    if plan.threads:
        torch.set_num_threads(int(plan.threads))
    spec = plan.spec()
    if data is None:
        data = training_data(llm_preset(plan.preset), plan.data, plan.digest)
    assert data.train is not None
    session = start_session(plan, data)
    start = _parameters(session)
    seconds = train_as_ranks(session, data.train, LlmHparams(**spec["hparams"]), spec["steps"], seed=spec["seed"],
                             world=plan.world, device=torch.device(plan.device))
    final = {name: t.detach().to("cpu") for name, t in session.model.state_dict().items()}
    return Replayed(start, final, seconds)




def _verdict(plan: Plan) -> dict[str, Any]:
    return {"trial": plan.proposal.get("trial"), "ratio": None, "equal": False, "steps": 0, "seconds": 0.0,
            "error": None, "data_error": None, "tolerance": tolerance_for(plan.precision), "passed": False,
            "world": plan.world}


def _files(plan: Plan) -> list[tuple[Path, str | None, str]]:
    files = [(plan.weights, plan.weights_sha256, "the trial's weights")]
    if plan.parent_weights is not None:
        files.append((plan.parent_weights, plan.parent_weights_sha256, "the parent's weights"))
    if plan.parent_optimizer is not None:
        files.append((plan.parent_optimizer, plan.parent_optimizer_sha256, "the parent's moments"))
    return files


def reexecute(plan: Plan) -> dict[str, Any]:
    """Re-execute the trial of `plan` and compare: the verdict the command prints (the module docstring)."""
    out = _verdict(plan)
    try:  # first: without the data the re-execution cannot conclude, whatever the files
        data = training_data(llm_preset(plan.preset), plan.data, plan.digest)
    except ValueError as exc:  # TextError (packages missing), digests other than the preset's, ShardError
        out["data_error"] = str(exc)
        return out
    for path, want, what in _files(plan):
        if not path.is_file():
            out["error"] = f"{what}: {path} is missing"
            return out
        if want is not None and file_sha256(path) != want:
            out["error"] = f"{what}: {path.name}'s SHA-256 is not the one the log recorded"
            return out
    try:
        claimed = load_weights(plan.weights)
    except ValueError as exc:
        out["error"] = f"weights: {exc}"
        return out
    try:
        build_model(LlmArch.from_dict(plan.proposal["arch"])).load_state_dict(claimed, strict=True)
    except RuntimeError as exc:
        out["error"] = f"the weights do not fit the trial's architecture: {str(exc).splitlines()[0]}"
        return out
    try:
        replayed = replay(plan, data)
    except (RuntimeError, ValueError, KeyError) as exc:  # GrowthRefused, other growths, a batch the world cannot split
        out["error"] = f"re-execution: {type(exc).__name__}: {exc}"
        return out
    ratio = replayed.ratio(claimed)
    out.update(steps=plan.spec()["steps"], seconds=replayed.seconds, equal=replayed.equal(claimed),
               threads=torch.get_num_threads(), ratio=ratio if math.isfinite(ratio) else None)
    if not math.isfinite(ratio):
        out["error"] = "the claimed weights are the start state (or not finite): the trial moved nothing"
    out["passed"] = out["error"] is None and ratio <= out["tolerance"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiperf_runner.train.llm.reexecute",
                                     description="Re-execute an LLM trial and compare its final weights.")
    parser.add_argument("plan", type=Path, help="the plan (JSON): see the module's docstring")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        plan = Plan.from_json(json.loads(args.plan.read_text()), args.plan.parent)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(json.dumps({"ratio": None, "equal": False, "steps": 0, "seconds": 0.0, "passed": False,
                          "error": f"plan: {type(exc).__name__}: {exc}"}))
        return 2
    try:
        result = reexecute(plan)
    except Exception as exc:  # noqa: BLE001 - reported to the service as the re-execution's error
        result = {**_verdict(plan), "error": f"{type(exc).__name__}: {exc}"}
    result["wall_seconds"] = time.perf_counter() - started
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
