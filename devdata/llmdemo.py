"""The demo data's AIPerf-LLM results (devdata/demo.py): a run generated for a demo system by
devdata/llmfactory.py, signed with its site's key, witnessed by a stand-in for the service and verified by
`spec.verify` (devdata/reports.py `llm_report`); the Result, its series and trials are what the pipeline stores
of that report. Half are `llm-kjv` runs of small systems (the preset AIPerf-LLM ranks officially today), half the
`llm` production preset's on systems of up to MOST_NODES nodes, a node to a slot (open: its gate is provisional).
"""

from __future__ import annotations

import random
import tempfile
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from aiperf_runner.spec.llmrules import llm_preset

from devdata import reports
from devdata.llmfactory import LlmMachine, LlmPlan
from leaderboard import pipeline, systems
from leaderboard.models import Result, SiteKey, Submission, System, failed_of

MOST_NODES = 32
KJV_MOST_NODES = 2
LLM_SPAN_DAYS = 540  # AIPerf-LLM is a younger list than AIPerf


def default_count(n_results: int) -> int:
    """How many AIPerf-LLM results go with `n_results` image results: a tenth, at most 50 (each is a real
    verification of a run of a few hundred to a few thousand trials)."""
    return min(n_results // 10, 50)


@dataclass
class LlmDemoResult:
    submission: Submission
    result: Result
    points: list[dict[str, float]]
    trials: list[dict[str, Any]]


def plan_of(system: System, info: dict[str, Any], preset_name: str, rng: random.Random) -> tuple[LlmPlan, LlmMachine]:
    """The run a demo system makes of AIPerf-LLM's preset `preset_name`: its slots, time, efficiency and losses (its
    start is set by the caller, from the duration)."""
    precision = info["precision"] if info["precision"] in ("bf16", "fp16") else "bf16"
    machine = LlmMachine(system.accelerator_model, system.accelerator_count, system.nodes, system.cpu_model,
                         system.cpu_cores, info["peak_device"][precision], system_id=system.pk)
    if preset_name == "llm-kjv":
        # A byte-level model of a few hundred thousand parameters keeps an accelerator a few ten-thousandths busy;
        # its trials' start-up stays under their training, or the score would climb as models grow (unstable).
        preset = llm_preset("llm-kjv")
        best = min(max(rng.gauss(1.50, 0.04), 1.44), 1.68)
        plan = LlmPlan(preset="llm-kjv", slots=system.accelerator_count, devices_per_slot=1,
                       duration_s=round(rng.uniform(preset.min_duration_s * 2, 1200.0), 1),
                       efficiency=rng.uniform(0.0003, 0.0008), overhead_s=rng.uniform(2.0, 4.0), best_loss=best,
                       first_loss=best + rng.uniform(0.5, 0.8), precision=precision, seed=rng.getrandbits(32))
        return plan, machine
    best = min(max(rng.gauss(3.75, 0.25), 3.3), 4.4)
    plan = LlmPlan(preset="llm", slots=system.nodes, devices_per_slot=info["per_node"],
                   duration_s=round(rng.uniform(3700.0, 7200.0), 1),
                   efficiency=min(info["eff"] * rng.uniform(1.1, 1.7), 0.55), overhead_s=rng.uniform(15.0, 60.0),
                   best_loss=best, first_loss=best + rng.uniform(1.8, 2.5), precision=precision,
                   seed=rng.getrandbits(32), data_digest=f"{rng.getrandbits(256):064x}")
    return plan, machine


def generate(pairs: list[tuple[System, dict[str, Any]]], keys: dict[int, tuple[SiteKey, Any]], count: int,
             rng: random.Random, now: datetime) -> list[LlmDemoResult]:
    """`count` AIPerf-LLM results of systems among `pairs` (saved systems with their demo facts) of at most
    MOST_NODES nodes; `keys`: each site's key and its private half."""
    eligible = [(s, info) for s, info in pairs if s.nodes <= MOST_NODES]
    small = [(s, info) for s, info in eligible if s.nodes <= KJV_MOST_NODES]
    if not eligible or count < 1:
        return []
    # Every other result is an llm-kjv run of a small system (where there is one), the rest the `llm` preset's; a
    # system is drawn again only once every one has been.
    kjv = (count + 1) // 2 if small else 0
    picked = [(s, info, "llm-kjv") for s, info in _draw(small, kjv, rng)]
    picked += [(s, info, "llm") for s, info in _draw(eligible, count - kjv, rng)]
    out = []
    with tempfile.TemporaryDirectory(prefix="aiperf-demo-llm-") as tmp:
        for i, (system, info, preset_name) in enumerate(picked):
            verified = now - timedelta(days=LLM_SPAN_DAYS * rng.random() ** 0.7, minutes=rng.uniform(5, 600))
            verified = max(verified, system.created_at + timedelta(hours=rng.uniform(2, 48)))
            site_key, private = keys[system.site_id]
            run_id = uuid.UUID(int=rng.getrandbits(128)).hex
            plan, machine = plan_of(system, info, preset_name, rng)
            started = verified - timedelta(seconds=plan.duration_s + rng.uniform(60, 3600))
            report, run = reports.llm_report(Path(tmp) / f"run{i}", replace(plan, start=started.timestamp()), machine,
                                             private, systems.registration(system) or {}, system.site_id, run_id)
            if report["rejected"]:  # the factory's runs are meant to pass: a failure is a bug to see, not to store
                failed = [f"{c['name']}: {c['message']}" for c in report["checks"] if not c["passed"]]
                raise RuntimeError(f"a generated AIPerf-LLM run was rejected: {'; '.join(failed)}")
            report["demo"] = True
            values = pipeline.result_values(report, run)
            published_at = verified + timedelta(seconds=rng.uniform(1, 60))
            submission = Submission(site_id=system.site_id, key=site_key, bundle="", sha256=f"{rng.getrandbits(256):064x}",
                                    size=rng.randint(1, 40) * 1_000_000, run_id=run_id,
                                    status=Submission.Status.PUBLISHED, verified_at=verified, attempts=1,
                                    created_at=verified - timedelta(minutes=rng.uniform(1, 30)))
            result = Result(site_id=system.site_id, system=system, run_id=run_id, published=True, verified_at=verified,
                            published_at=published_at, failed_checks=failed_of(values["report"]), **values)
            out.append(LlmDemoResult(submission, result, report["series"], pipeline.llm_trial_rows(report)))
    return out


def _draw(pool: list[tuple[System, dict[str, Any]]], k: int, rng: random.Random) -> list[tuple[System, dict[str, Any]]]:
    """`k` systems of `pool`, each drawn once before any is drawn twice."""
    out: list[tuple[System, dict[str, Any]]] = []
    while pool and len(out) < k:
        out += rng.sample(pool, min(k - len(out), len(pool)))
    return out
