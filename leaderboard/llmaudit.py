"""The audit of an AIPerf-LLM result (docs/rules.md, "AIPerf-LLM"): what leaderboard/audit.py runs for a Result
whose workload is llm, in place of the image workload's re-evaluation and re-execution.

An LLM run commits no training states, so its audit is the challenged trials' weights alone: per trial, in a
subprocess with the audit's limits (`python -m aiperf_runner.train.llm.reevaluate`), `audit.weights` (the
stored file's SHA-256 is the one `trial_finished` logged, and it is a safetensors file), `audit.architecture`
(it loads with strict=True into the model of the trial's architecture as the verified log's `trial_proposed`
line gives it: the run's own trial.json is never read) and `audit.loss` (its validation loss, re-evaluated on
the preset's validation text with the trainer's own evaluation, is the logged one within
`spec.llmrules.AUDIT_LOSS_TOLERANCE`): a trial program that logs a lower loss than its weights reach fails.

This module holds the LLM's own parts; the loop over the challenged trials, the subprocess and the checks the
two workloads share stay in audit.py (which imports this module, never the other way round).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aiperf_runner.spec import rules as spec_rules
from aiperf_runner.spec.eventlog import LogError, read_events
from aiperf_runner.spec.llmrules import AUDIT_LOSS_TOLERANCE, LLM_PRESETS

PROGRAM = "aiperf_runner.train.llm.reevaluate"


def proposed_archs(root: Path) -> dict[str, Any]:
    """Each trial's architecture (an LlmArch dict) as the stored bundle's log proposed it: the log verified
    when the result was stored, so this is the architecture whose FLOPs were counted."""
    try:
        events = read_events(root / "events.jsonl")
    except (LogError, OSError):
        return {}
    archs: dict[str, Any] = {}
    for ev in events:
        if ev.get("type") == "trial_proposed" and isinstance(ev.get("trial"), str):
            archs.setdefault(ev["trial"], ev.get("arch"))
    return archs


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
