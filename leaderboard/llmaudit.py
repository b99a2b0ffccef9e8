"""The audit of an AIPerf-LLM result (docs/rules.md, "AIPerf-LLM"): what leaderboard/audit.py runs for a Result
whose workload is llm, in place of the image workload's re-evaluation and re-execution of committed segments.

- **The challenged trials' weights**, per trial, in a subprocess with the audit's limits
  (`python -m aiperf_runner.train.llm.reevaluate`): `audit.weights` (the stored file's SHA-256 is the one
  `trial_finished` logged, and it is a safetensors file), `audit.architecture` (it loads with strict=True into the
  model of the trial's architecture as the verified log's `trial_proposed` line gives it: the run's own trial.json
  is never read) and `audit.loss` (its validation loss, re-evaluated on the preset's validation text with the
  trainer's own evaluation, is the logged one within `spec.llmrules.AUDIT_LOSS_TOLERANCE`).
- **The drawn trials re-executed** (`draw`, `python -m aiperf_runner.train.llm.reexecute`): a trial's whole
  training again, from the start its log binds (the seed's initialisation, or its parent's uploaded weights and
  moments grown by the logged growths) for its logged steps, to the weights it claims (`audit.reexecute`, within
  `spec.llmrules.reexecute_tolerance`): a trial that trained fewer steps than it logged, or other data, fails.

This module holds the LLM's own parts; the loop over the trials, the subprocess and the checks the two workloads
share stay in audit.py (which imports this module, never the other way round).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiperf_runner.spec import rules as spec_rules
from aiperf_runner.spec.eventlog import LogError, read_events
from aiperf_runner.spec.llmrules import AUDIT_LOSS_TOLERANCE, AUDIT_REEXECUTE_TRIALS, LLM_PRESETS, reexecute_tolerance

PROGRAM = "aiperf_runner.train.llm.reevaluate"


def shard_preset(preset: str) -> bool:
    """Whether the preset trains on a site's token shards (`llm`, `llm-bytes`): its validation shards are the
    service's to provide (AIPERF_AUDIT_DATA), as an image preset's validation images are."""
    known = LLM_PRESETS.get(preset)
    return known is not None and known.shards is not None


def argv(root: Path, trial: str, arch: Any, weights: Path, preset: str, device: str,
         data: str | None = None) -> list[str]:
    """The re-evaluation's command line (after `python -m`): the logged architecture written beside the
    extracted bundle, where the subprocess reads it; a shard preset's validation shards at `data`, whose manifest
    must be the one the run's `dataset.digest` names."""
    arch_file = root / f"audit-arch-{trial}.json"
    arch_file.write_text(json.dumps(arch))
    out = [PROGRAM, str(arch_file), str(weights), "--preset", preset, "--device", device]
    if data is not None:
        digest = (json.loads((root / "run.json").read_text()).get("dataset") or {}).get("digest")
        out += ["--data", data, *(["--digest", str(digest)] if digest else [])]
    return out


def unproposed(trial: str) -> dict[str, Any]:
    """The verdict on a trial the verified log never proposed (it has no architecture to load into)."""
    return {"architecture_ok": False, "error": f"the verified log proposes no trial {trial}"}


def no_data(preset: str, why: str, submission_id: int) -> str:
    """Why the audit waits: the service could not make the preset's validation text (not the site's fault)."""
    return (f"this service cannot make the validation text of preset {preset!r} ({why}); the audit waits until "
            f"an operator installs it (manage.py aiperf_audit --submission {submission_id} runs it again)")


def loss_check(trial: str, logged: dict[str, Any], verdict: dict[str, Any]) -> dict[str, Any]:
    """audit.loss of one trial: the re-evaluated validation loss against its logged `val_loss`."""
    measured, claimed = verdict.get("val_loss"), logged.get("val_loss")
    if not verdict.get("architecture_ok") or measured is None or claimed is None:
        why = verdict.get("error") or ("no logged loss" if claimed is None else "no loss")
        return spec_rules.check("audit.loss", AUDIT_LOSS_TOLERANCE, None, False,
                                f"trial {trial}: not re-evaluated ({why})")
    diff = float(measured) - float(claimed)
    ok = abs(diff) <= AUDIT_LOSS_TOLERANCE
    verdict_text = "" if ok else (": the weights do not reach the logged loss" if diff > 0 else
                                  ": the weights do better than the loss logged for them")
    return spec_rules.check(
        "audit.loss", AUDIT_LOSS_TOLERANCE, diff, ok,
        f"trial {trial}: re-evaluated validation loss {float(measured):.4f} nats per byte on the preset's "
        f"{int(verdict.get('targets') or 0):,} validation targets, logged {float(claimed):.4f} "
        f"(tolerance {AUDIT_LOSS_TOLERANCE:g}){verdict_text}")


# ---- the trials re-executed (train/llm/reexecute.py) -------------------------------------------------------------
REEXECUTE = "aiperf_runner.train.llm.reexecute"


def draw(report: Mapping[str, Any], seed: int, n: int = AUDIT_REEXECUTE_TRIALS) -> dict[str, Any]:
    """The trials the audit re-executes (spec/llmrules.py AUDIT_REEXECUTE_TRIALS): the best always, the others
    drawn with the service's randomness (`seed`) weighted by the FLOPs the rules count for them (the report's
    `kept_weights`), among the finished trials whose start the log binds; each with the digests of the files the
    site uploads for it (its weights; a child's parent's weights and AdamW moments). {} for an unwitnessed run
    (never official) or one that keeps no weights."""
    witnessed = any(c["name"] == "witness.token" and c["passed"] for c in report.get("checks") or [])
    kept: Mapping[str, Mapping[str, Any]] = report.get("kept_weights") or {}
    if not witnessed or not kept:
        return {}
    parents = {str(t.get("trial")): (t.get("parent") or None) for t in report.get("trials") or []}
    eligible = {t: e for t in sorted(kept) if (e := drawable(t, parents.get(t), kept)) is not None}
    best = report.get("best_trial")
    picked = [best] if best in eligible else []
    pool = [t for t in eligible if t not in picked]
    rng = random.Random(seed)
    while len(picked) < n and pool:
        trial = rng.choices(pool, [max(float(kept[t].get("flops") or 0), 1.0) for t in pool])[0]
        picked.append(trial)
        pool.remove(trial)
    return {"reexecute": [eligible[t] for t in sorted(picked)], "of": len(eligible), "finished": len(kept)}


def drawable(trial: str, parent: str | None, kept: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """What re-executing `trial` needs uploaded; None when its log does not bind its start (a parent whose weights
    or moments it never recorded: a log from before `optimizer_sha256`)."""
    if parent is None:
        return {"trial": trial, "parent": None, "weights": kept[trial]["sha256"]}
    of_parent = kept.get(parent) or {}
    if not of_parent.get("sha256") or not of_parent.get("optimizer_sha256"):
        return None
    return {"trial": trial, "parent": parent, "weights": kept[trial]["sha256"],
            "parent_weights": of_parent["sha256"], "parent_optimizer": of_parent["optimizer_sha256"]}


def proposals(root: Path) -> dict[str, dict[str, Any]]:
    """Each trial's `trial_proposed` line as the stored bundle's verified log has it."""
    try:
        events = read_events(root / "events.jsonl")
    except (LogError, OSError):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for ev in events:
        if ev.get("type") == "trial_proposed" and isinstance(ev.get("trial"), str):
            out.setdefault(ev["trial"], ev)
    return out


def reexecute_plan(root: Path, drawn: Mapping[str, Any], states: Mapping[str, Path], proposed: Mapping[str, Any],
                   preset: str, precision: str, device: str, data: str | None = None) -> Path | None:
    """The re-execution's PLAN.json for one drawn trial (train/llm/reexecute.py), written beside the extracted
    bundle: every field of the trial from the verified log (its `trial_proposed` line, its parent's architecture),
    the run's seed and ranks from run.json, the precision the service judges it at, the uploaded files with the
    digests the log recorded. None when the log proposes no such trial (or not its parent)."""
    trial, parent = str(drawn["trial"]), drawn.get("parent")
    if trial not in proposed or (parent is not None and parent not in proposed):
        return None
    run = json.loads((root / "run.json").read_text())
    ev = proposed[trial]
    plan = {"proposal": {k: ev.get(k) for k in ("trial", "arch", "parent", "growths", "hparams", "steps")},
            "parent_arch": proposed[parent]["arch"] if parent is not None else None,
            "run_seed": run.get("seed"), "world": run.get("devices_per_slot"), "preset": preset,
            "weights": str(states[drawn["weights"]]), "weights_sha256": drawn["weights"],
            "precision": precision, "device": device, "data": data,
            "digest": (run.get("dataset") or {}).get("digest") if data is not None else None}
    if parent is not None:
        plan.update(parent_weights=str(states[drawn["parent_weights"]]), parent_weights_sha256=drawn["parent_weights"],
                    parent_optimizer=str(states[drawn["parent_optimizer"]]),
                    parent_optimizer_sha256=drawn["parent_optimizer"])
    path = root / f"audit-reexecute-{trial}.json"
    path.write_text(json.dumps(plan))
    return path


def reexecute_check(drawn: Mapping[str, Any], verdict: Mapping[str, Any], precision: str) -> dict[str, Any]:
    """audit.reexecute of one drawn trial, from train/llm/reexecute.py's verdict, judged by the service's tolerance
    for `precision` (spec/llmrules.py `audited_precision`)."""
    trial, parent = drawn["trial"], drawn.get("parent")
    tolerance = reexecute_tolerance(precision)
    start = f"its parent {parent}'s weights and moments, grown" if parent else "the seed's initialisation"
    where = (f"trial {trial} ({int(verdict.get('steps') or 0)} steps on {verdict.get('world') or '?'} rank(s), from "
             f"{start})")
    ratio = verdict.get("ratio")
    ok = ratio is not None and float(ratio) <= tolerance
    if verdict.get("error"):
        return spec_rules.check("audit.reexecute", tolerance, None, False,
                                f"trial {trial}: not re-executed ({verdict['error']})")
    if verdict.get("equal"):
        message = f"{where}: re-executed to the claimed weights exactly"
    else:
        message = (f"{where}: re-executed to {float(ratio or 0):.3g} of the trial's own move away from the claimed "
                   f"weights (tolerance {tolerance:g})"
                   + ("" if ok else ": the claimed weights are not what the trial's logged steps make"))
    return spec_rules.check("audit.reexecute", tolerance, ratio, ok, message)


def not_drawn(drawn: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict on a drawn trial the verified log never proposed (nothing to re-execute it from)."""
    return {"error": f"the verified log proposes no trial {drawn['trial']} or no parent {drawn.get('parent')}"}
