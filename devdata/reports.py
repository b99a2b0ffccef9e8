"""Verification reports of demo results: `spec.verify` run for real on a few generated runs, then varied.

`template(preset)` writes one small contract-conform run of that preset (devdata/runfactory.py),
signs it with a throwaway key and verifies it with `aiperf_runner.spec.verify.verify`, as the
service does (once per process). `report(...)` gives a demo result that report with the demo
result's own figures put in: every check that measures one of them (duration, precision, accuracy,
the score series, peaks, trials, epochs, concurrency, the signing key) is made again by the spec's
own check function in `spec/rules.py` on the new figure; the others (manifest, run.json, the
trials' lifecycle, timestamps, ...) stay as `verify` wrote them. Division and flags follow from the
checks exactly as `verify` derives them.

An AIPerf-LLM demo result's report is not varied: `llm_report` verifies a generated run of that result's own
figures (devdata/llmfactory.py): a few hundred trials, made and verified in a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import tempfile
from pathlib import Path
from typing import Any

from aiperf_runner.spec import bundle, hardware, keys
from aiperf_runner.spec import rules as R
from aiperf_runner.spec.replay import Replay
from aiperf_runner.spec.verify import verify

from devdata.llmfactory import LlmMachine, LlmPlan, make_llm_run
from devdata.runfactory import DEFAULT_DATASET, IMAGENET_DATASET, TestWitness, make_run, registration_of

DATASETS: dict[str, dict[str, Any]] = {
    "imagenet": IMAGENET_DATASET,
    "cifar": {"name": "cifar", "train_images": 50_000, "val_images": 10_000, "classes": 10, "image_size": 32},
    "smoke": DEFAULT_DATASET,
}


@functools.cache
def template(preset: str) -> dict[str, Any]:
    """The report `spec.verify` gives a small signed run of `preset` (its checks are what a demo report varies)."""
    with tempfile.TemporaryDirectory(prefix="aiperf-demo-template-") as tmp:
        run = Path(tmp) / preset
        witness = TestWitness()
        make_run(run, preset=preset, dataset=DATASETS[preset], slots=2, trials=4, epochs=2, declared_peak=None,
                 precision="bf16", accelerator_model="NVIDIA H100 80GB HBM3", accelerator_count=2, seed=1,
                 witness=witness)
        key = keys.generate_key()
        bundle.write_manifest(run, key)
        return verify(run, pubkey=key.public_key(), require_signature=True, workers=1,
                      system=registration_of(run), witness_keys=witness.keys)


def report(run: dict[str, Any], points: list[dict[str, float]], *, trials: int, trials_finished: int,
           architectures: int, epochs: int, epoch_ratio: float, fingerprint: str) -> dict[str, Any]:
    """The verification report of a demo run described by its run.json `run` and score series `points`.

    `trials`, `architectures` (distinct graphs) and `epochs` are the run's counts, `epoch_ratio` its
    fastest epoch's share of its slot's peak, `fingerprint` the key it was signed with.
    """
    th = R.thresholds()
    base = template(run["preset"])
    precision = run["precision"]
    final = points[-1]
    declared = run["declared_peak_flops"].get(precision)
    # Demo systems are registered and approved as their run.json describes them (devdata/demo.py).
    hw = dataclasses.replace(hardware.from_run(run), registered=True)
    peak, how = hw.peak(precision, th.get("cpu_clock_ghz"))
    slots = run["config"]["slots"]
    devices = run["config"]["devices_per_slot"]
    count = hw.accelerators
    # What LogAudit would have counted streaming this run's log: run_started and run_finished, three
    # lines per trial (proposed, started, ended) and one per epoch; every slot busy at once.
    audit = R.LogAudit(run, th, Replay(slots=slots))
    audit.events = 2 + 3 * trials + epochs
    audit.replay.max_running = slots
    audit.max_epoch_ratio = epoch_ratio
    audit.max_epoch_rate = epoch_ratio * peak * devices / count if peak and count else None
    remade = [
        R.check_chain(audit.events, None),
        R.check_signature(True, [], True, fingerprint),
        R.check_versions(run, th),
        R.check_schema(audit),
        R.check_graphs(R.Findings(), trials, architectures),  # no findings: every graph valid
        R.check_preset(run["preset"], th),
        R.check_duration(final["t"], th),
        R.check_precision(precision, th),
        R.check_accuracy(final["max_accuracy"], th),
        R.check_full_validation(audit, run["preset"], epochs, th),
        R.check_stability(points, th),
        R.check_declared_peak(declared, peak, how, precision, th),
        R.check_score_peak(max(p["score"] for p in points), peak, th),
        R.check_epoch_rate(audit, bool(peak), th),
        R.check_concurrency(audit),
    ]
    by_name = {c["name"]: c for c in remade}
    checks = [by_name.get(c["name"], c) for c in base["checks"]]
    integrity_ok = R.all_passed(checks, "integrity")
    valid = R.all_passed(checks, "validity")
    return {
        **base,
        "integrity_ok": integrity_ok, "score_ops": final["score"], "regulated_score_ops": final["regulated"],
        "max_accuracy": final["max_accuracy"], "duration_s": final["t"], "trials_finished": trials_finished,
        "epochs": epochs, "checks": checks, "run_id": run["run_id"], "fingerprint": fingerprint,
        "division": "official" if R.official(checks) else "open", "series": points, "valid": valid,
        "stable": R.all_passed(checks, "stability"), "plausible": R.all_passed(checks, "plausibility"),
        "rejected": bool(R.blocking(checks)), "peak_flops": peak,
        "efficiency": final["score"] / peak if peak else None, "epoch_fingerprints": [],
        "system": {**base["system"], "accelerator_model": hw.accelerator_model, "accelerators": hw.accelerators,
                   "nodes": hw.nodes, "describe": hw.describe()},
    }


def llm_report(path: Path, plan: LlmPlan, machine: LlmMachine, key: Any, registration: dict[str, Any],
               site: int, run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(report, run.json) of a generated AIPerf-LLM run of `plan` on `machine`, written in `path`, signed with the
    site's `key` and witnessed by a stand-in for the service: `spec.verify`'s own report of it, judged by
    `registration` (no figure put in afterwards; devdata/llmfactory.py makes the run say what the demo wants)."""
    witness = TestWitness(site=site, system=int(registration["id"]))
    make_llm_run(path, plan, machine, witness, run_id=run_id)
    bundle.write_manifest(path, key)
    report = verify(path, pubkey=key.public_key(), require_signature=True, workers=1, system=registration,
                    witness_keys=witness.keys)
    return report, json.loads((path / "run.json").read_text())
