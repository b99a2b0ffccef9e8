"""Verification of an AIPerf-LLM run (`workload: llm`): its log's story checked, its FLOPs recounted by the
rules (spec.llmflops, llm-v1) and its score computed here, never taken from the run. `verify` (spec/verify.py)
hands a run directory here when its run.json declares the workload.

Checks (docs/rules.md, "AIPerf-LLM"): `integrity.*` — the signature and manifest (as for images), the log's
hash chain, run.json and the preset's data digests, the trials' lifecycle and times, every architecture (its
hash, the seed's, each child equal to its parent's grown by the logged growths), every trial's tokens (its step
budget x its batch) and FLOPs; `validity.*` — every growth kept its parent's function (the trial's logged
probe gap within the tolerance), the best validation loss at or under the preset's gate, the run's duration,
at least one finished trial; `stability.*` and `plausibility.*` — the image workload's bounds on the score
series, the peak, each trial's training rate, the slots and the log's times (spec/llmplausibility.py). Only
trials that finished count: their `train_end` FLOPs over the run's time (run_started to run_finished) is the
score.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import fingerprint
from . import rules as R
from .eventlog import LogError, read_events
from .llmflops import LlmArch, LlmArchError, train_flops_per_token
from .llmgrowth import llm_arch_hash, replay
from .llmplausibility import Occupancy
from .llmplausibility import checks as plausibility_checks
from .llmrules import GROWTH_TOLERANCE, RULES, WORKLOAD, LlmPreset, LlmPresetError, llm_preset
from .llmrules import regulated_score_ops as llm_regulated
from .llmrules import score_ops as llm_score
from .llmtrust import division, trust_checks
from .witness import ServiceRecords


def verify_llm(root: Path, run: Mapping[str, Any], signature_checks: list[dict[str, Any]],
               fingerprint: str | None, *, registration: Mapping[str, Any] | None = None,
               witness_keys: Mapping[str, bytes] | None = None, records: ServiceRecords | None = None,
               witness_rules: str | None = None) -> dict[str, Any]:
    """The report of the LLM run in `root` (run.json read as `run`); `signature_checks` as verify makes them.
    `registration`, `witness_keys`, `records`: as for images (the service passes them); `witness_rules`: the
    image rules version whose witness thresholds apply (None: the current ones)."""
    report: dict[str, Any] = {
        "workload": WORKLOAD, "integrity_ok": False, "rules": RULES, "rules_version": RULES, "score_ops": 0.0,
        "regulated_score_ops": 0.0, "max_accuracy": 0.0, "best_loss": None, "duration_s": 0.0,
        "trials_finished": 0, "epochs": 0, "tokens_trained": 0, "flops": 0, "morphisms_used": [], "checks": [],
        "run_id": run.get("run_id"), "fingerprint": fingerprint, "division": "open", "series": [],
        "valid": False, "stable": False, "plausible": False, "spec_version": run.get("spec_version"),
        "rejected": True, "peak_flops": None, "efficiency": None, "system": None, "epoch_fingerprints": [],
        "kept_weights": {}, "best_trial": None, "trials": [], "precision": run.get("precision"),
    }
    checks = list(signature_checks)
    try:
        events = read_events(root / "events.jsonl")
        checks.append(R.check("integrity.log_chain", "an unbroken hash chain", len(events), True, "intact"))
    except (LogError, OSError) as exc:
        checks.append(R.check("integrity.log_chain", "an unbroken hash chain", None, False, str(exc)))
        return _finish(report, checks)
    preset, problems = _preset(run)
    checks.append(R.check("integrity.run_json", "workload llm, a known preset, its data's digests", None,
                          not problems, "; ".join(problems) or "as the preset binds them"))
    if preset is None:
        return _finish(report, checks)
    story = _Story(preset, events)
    checks += story.checks()
    finished = story.finished
    report.update(duration_s=story.duration_s, trials_finished=len(finished), tokens_trained=story.tokens,
                  flops=story.flops, morphisms_used=sorted(story.morphisms))
    if finished:
        best = min(finished, key=lambda t: finished[t])
        report.update(best_loss=finished[best], best_trial=best, max_accuracy=math.exp(-finished[best]))
    checks += [
        R.check("validity.trials", ">= 1 finished trial", len(finished), bool(finished),
                f"{len(finished)} trial(s) finished"),
        R.check("validity.loss", f"best validation loss <= {preset.loss_gate} nats", report["best_loss"],
                report["best_loss"] is not None and report["best_loss"] <= preset.loss_gate,
                f"best {report['best_loss']} nats, gate {preset.loss_gate} ({preset.gate_reason})"),
        R.check("validity.duration", f">= {preset.min_duration_s:.0f} s", story.duration_s,
                story.duration_s >= preset.min_duration_s, f"{story.duration_s:.1f} s"),
    ]
    report["score_ops"] = llm_score(story.flops, story.duration_s)
    report["regulated_score_ops"] = llm_regulated(report["score_ops"], report["best_loss"])
    report.update(series=story.series(), trials=story.trial_rows(), epoch_fingerprints=story.fingerprints,
                  kept_weights=story.kept_weights())
    judged = trust_checks(run, events, registration=registration, witness_keys=witness_keys, records=records,
                          rules_version=witness_rules)
    checks += judged.checks
    checks += plausibility_checks(story.occupancy, report["series"], run, judged.hardware, judged.peak,
                                  judged.peak_source, R.thresholds(witness_rules or R.RULES_VERSION))
    report.update(peak_flops=judged.peak, peak_source=judged.peak_source, system={
        "registered": judged.hardware.registered, "describe": judged.hardware.describe()},
        efficiency=report["score_ops"] / judged.peak if judged.peak else None)
    report = _finish(report, checks)
    report["division"] = division(run, checks, witness_rules)
    return report


def counted(run: Mapping[str, Any], events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the rules count of an AIPerf-LLM log, finished or still being written (`status`, `report`): the
    finished trials, their tokens and FLOPs (llm-v1's, never the log's) and the best validation loss; None when
    run.json names no AIPerf-LLM preset."""
    preset, _ = _preset(run)
    if preset is None:
        return None
    story = _Story(preset, events)
    return {"trials_finished": len(story.finished), "tokens_trained": story.tokens, "flops": story.flops,
            "best_loss": min(story.finished.values(), default=None)}


def _finish(report: dict[str, Any], checks: list[dict[str, Any]]) -> dict[str, Any]:
    report["checks"] = checks
    report["integrity_ok"] = R.all_passed(checks, "integrity")
    report["valid"] = report["integrity_ok"] and R.all_passed(checks, "validity")
    report["stable"] = report["valid"] and R.all_passed(checks, "stability")
    report["plausible"] = report["integrity_ok"] and R.all_passed(checks, "plausibility")
    report["rejected"] = not report["integrity_ok"] or bool(R.blocking(checks))
    if not report["integrity_ok"]:
        report["score_ops"] = report["regulated_score_ops"] = 0.0
    return report


def _preset(run: Mapping[str, Any]) -> tuple[LlmPreset | None, list[str]]:
    if run.get("workload") != WORKLOAD:
        return None, [f"run.json workload is {run.get('workload')!r}, not {WORKLOAD!r}"]
    try:
        preset = llm_preset(str(run.get("preset")))
    except LlmPresetError as exc:
        return None, [str(exc)]
    problems = []
    if run.get("rules") != RULES:
        problems.append(f"rules {run.get('rules')!r}, expected {RULES!r}")
    data = run.get("dataset") or {}
    if preset.shards is not None:
        return preset, problems + _shard_data_problems(preset, data)
    for key in ("train_sha256", "val_sha256", "train_bytes", "val_bytes"):
        if data.get(key) != getattr(preset, key):
            problems.append(f"dataset {key} {data.get(key)!r} is not the preset's {getattr(preset, key)!r}")
    return preset, problems


def _shard_data_problems(preset: LlmPreset, data: Any) -> list[str]:
    """A shard preset's data block (`llm`, `llm-bytes`): no corpus digest can be pinned, so the shards' format,
    tokenizer, vocabulary and token counts are held to the preset's binding and the manifest's digest must be
    one (spec/llmrules.py LlmShardBinding; the trials and the audit check the shards against it)."""
    assert preset.shards is not None
    if not isinstance(data, Mapping):
        return [f"dataset is {type(data).__name__}, not an object"]
    return preset.shards.problems(data)


WITNESS_LINES = ("heartbeat", "witness")


class _Story:
    """The main log read once: each trial's proposal, attempts and training, and what is wrong with them."""

    def __init__(self, preset: LlmPreset, events: list[dict[str, Any]]) -> None:
        self.preset = preset
        self.problems: dict[str, list[str]] = {"lifecycle": [], "architecture": [], "flops": [], "growth": []}
        self.archs: dict[str, LlmArch] = {}
        self.proposed: dict[str, dict[str, Any]] = {}
        self.started: dict[tuple[str, int], float] = {}
        self.trained: dict[tuple[str, int], dict[str, Any]] = {}
        self.finished: dict[str, float] = {}
        self.finished_at: dict[str, float] = {}
        self.flops = self.tokens = 0
        self.morphisms: set[str] = set()
        self.growths_checked = 0
        self.attempts: dict[str, dict[str, Any]] = {}  # each trial's last attempt: slot, times, how it ended
        self.fingerprints: list[str] = []
        self.weights: dict[str, Any] = {}  # the weights_sha256 of each finished trial
        self.moments: dict[str, Any] = {}  # its optimizer_sha256 (AdamW's moments: what a child inherits besides)
        self.finishes: list[tuple[float, float, int]] = []  # (t, loss, FLOPs counted) of each finished trial
        self.counted: dict[str, int] = {}  # the FLOPs the rules count for each finished trial
        # A witnessed run's last heartbeat and receipt follow run_finished (run/llmwitness.py): not the run's story.
        story = [e for e in events if e.get("type") not in WITNESS_LINES]
        first, last = story[0] if story else {}, story[-1] if story else {}
        self.t0 = float(first.get("t", 0)) if events else 0.0
        if first.get("type") != "run_started":
            self.problems["lifecycle"].append("the log does not begin with run_started")
        if last.get("type") != "run_finished":
            self.problems["lifecycle"].append("the log does not end with run_finished (the run is incomplete)")
        self.duration_s = float(last.get("t", 0) - first.get("t", 0)) if events else 0.0
        self.occupancy = Occupancy.starting(first)  # the slots and training rates, read in this same pass
        for number, ev in enumerate(events, 1):
            handler = getattr(self, "_on_" + str(ev.get("type")), None)
            if handler is not None:
                try:
                    handler(ev)
                except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a line without its fields
                    self._bad("lifecycle",
                              f"line {number} ({ev.get('type')}): malformed ({type(exc).__name__}: {exc})")
            self.occupancy.read(number, ev, self.flops_counted(ev) if ev.get("type") == "train_end" else None)

    def _bad(self, kind: str, message: str) -> None:
        if len(self.problems[kind]) < 20:
            self.problems[kind].append(message)

    def _on_trial_proposed(self, ev: dict[str, Any]) -> None:
        trial = ev["trial"]
        try:
            arch = LlmArch.from_dict(ev["arch"])
        except LlmArchError as exc:
            return self._bad("architecture", f"{trial}: {exc}")
        if trial in self.proposed:
            self._bad("lifecycle", f"{trial} proposed twice")
        self.proposed[trial], self.archs[trial] = ev, arch
        if ev.get("arch_hash") != llm_arch_hash(arch):
            self._bad("architecture", f"{trial}: arch_hash is not the architecture's")
        parent = ev.get("parent")
        if parent is None:
            if ev.get("growths") or arch != self.preset.seed_arch:
                self._bad("architecture", f"{trial}: a trial without a parent must be the preset's seed")
        elif parent not in self.archs:
            self._bad("architecture", f"{trial}: its parent {parent} was not proposed before it")
        else:
            try:
                grown = replay(self.archs[parent], ev.get("growths") or [])
            except LlmArchError as exc:
                return self._bad("architecture", f"{trial}: its growths cannot be applied: {exc}")
            if grown != arch:
                self._bad("architecture", f"{trial}: its parent grown by its growths is not its architecture")
        if ev.get("steps") != self.preset.steps_per_trial:
            self._bad("lifecycle", f"{trial}: a budget of {ev.get('steps')} steps, the preset's is "
                                   f"{self.preset.steps_per_trial}")

    def _on_trial_started(self, ev: dict[str, Any]) -> None:
        if ev["trial"] not in self.proposed:
            return self._bad("lifecycle", f"{ev['trial']} started before it was proposed")
        parent = self.proposed[ev["trial"]].get("parent")
        if parent is not None and parent not in self.finished:  # it starts from its parent's final weights
            self._bad("architecture", f"{ev['trial']}: started before its parent {parent} finished")
        self.started[(ev["trial"], ev["attempt"])] = ev["t"]
        self.attempts[ev["trial"]] = {"slot": ev.get("slot"), "started": ev["t"], "ended": None, "status": "running"}

    def _on_train_end(self, ev: dict[str, Any]) -> None:
        key, trial = (ev["trial"], ev["attempt"]), ev["trial"]
        if key not in self.started:
            return self._bad("lifecycle", f"{trial} attempt {ev['attempt']}: train_end without trial_started")
        if not self.started[key] <= ev["started_at"] <= ev["ended_at"] <= ev["t"]:
            self._bad("lifecycle", f"{trial}: training times out of order with the log")
        proposal, arch = self.proposed[trial], self.archs.get(trial)
        if arch is None:
            return
        batch = (proposal.get("hparams") or {}).get("batch_tokens")
        if ev["steps"] != proposal["steps"] or ev["tokens_trained"] != ev["steps"] * batch:
            self._bad("flops", f"{trial}: {ev['tokens_trained']} tokens in {ev['steps']} steps, expected "
                               f"{proposal['steps']} steps of {batch} tokens")
        expected = train_flops_per_token(arch, RULES).train * ev["tokens_trained"]
        if ev["flops"] != expected:
            self._bad("flops", f"{trial}: {ev['flops']} FLOPs claimed, the rules count {expected}")
        kinds = [g.get("kind") for g in proposal.get("growths") or []]
        if list(ev.get("growths") or []) != kinds:
            self._bad("growth", f"{trial}: trained after growths {ev.get('growths')}, proposed {kinds}")
        gap = ev.get("growth_gap")
        if kinds and (gap is None or not gap <= GROWTH_TOLERANCE):
            self._bad("growth", f"{trial}: its growths changed the logits by {gap} (tolerance {GROWTH_TOLERANCE})")
        self.trained[key] = {**ev, "flops_counted": expected}

    def _on_trial_finished(self, ev: dict[str, Any]) -> None:
        key, trial = (ev["trial"], ev["attempt"]), ev["trial"]
        trained = self.trained.get(key)
        if trained is None:
            return self._bad("lifecycle", f"{trial}: finished without a train_end")
        if ev.get("val_loss") != trained.get("val_loss") or not math.isfinite(float(ev["val_loss"])):
            return self._bad("lifecycle", f"{trial}: finished with a loss its training did not report")
        self.finished[trial], self.finished_at[trial] = float(ev["val_loss"]), ev["t"]
        self.weights[trial] = ev.get("weights_sha256")
        self.moments[trial] = ev.get("optimizer_sha256")
        self.counted[trial] = trained["flops_counted"]
        self.finishes.append((float(ev["t"]), float(ev["val_loss"]), trained["flops_counted"]))
        if len(self.fingerprints) < fingerprint.MOST:  # a copied log repeats them (the service's duplicate check)
            self.fingerprints.append(fingerprint.record_digest(trained, str(self.proposed[trial].get("arch_hash"))))
        self._ended(trial, ev["t"], "finished")
        self.flops += trained["flops_counted"]
        self.tokens += trained["tokens_trained"]
        self.morphisms.update(trained.get("growths") or [])
        self.growths_checked += len(trained.get("growths") or [])

    def _on_trial_failed(self, ev: dict[str, Any]) -> None:
        self._ended(ev["trial"], ev["t"], "failed")

    def _on_trial_cancelled(self, ev: dict[str, Any]) -> None:
        self._ended(ev["trial"], ev["t"], "cancelled")

    def _ended(self, trial: str, t: float, status: str) -> None:
        if trial in self.attempts:
            self.attempts[trial].update(ended=t, status=status)

    def flops_counted(self, train_end: Mapping[str, Any]) -> int | None:
        """The rules' FLOPs of a `train_end` line the story accepted (None for any other)."""
        trained = self.trained.get((train_end.get("trial"), train_end.get("attempt")))  # type: ignore[arg-type]
        return trained.get("flops_counted") if trained else None

    def kept_weights(self) -> dict[str, dict[str, Any]]:
        """{trial: {sha256, val_loss, optimizer_sha256, flops}} of every finished trial whose weights the log names
        (each child trains from its parent's, so a run keeps them all): what the service's audit may ask for.
        `optimizer_sha256` is the digest of its AdamW moments (`optimizer.safetensors`; None in a log from before
        it was recorded): with the weights, the state its children start from (train/llm/reexecute.py). `flops`:
        what the rules count for the trial, by which the audit weights its draw of trials to re-execute."""
        return {t: {"sha256": self.weights[t], "val_loss": loss, "flops": self.counted.get(t, 0),
                    "optimizer_sha256": m if isinstance(m := self.moments.get(t), str) else None}
                for t, loss in self.finished.items() if isinstance(self.weights.get(t), str)}

    def series(self) -> list[dict[str, float]]:
        """The run's score, regulated score and best loss after each finished trial (for the result's charts)."""
        points, flops, best = [], 0, math.inf
        for t, loss, counted in sorted(self.finishes):
            flops, best = flops + counted, min(best, loss)
            elapsed = t - self.t0
            score = llm_score(flops, elapsed) if elapsed > 0 else 0.0
            points.append({"t": elapsed, "score": score, "regulated": llm_regulated(score, best), "best_loss": best})
        if points and self.duration_s > points[-1]["t"]:
            score = llm_score(flops, self.duration_s)
            points.append({"t": self.duration_s, "score": score, "regulated": llm_regulated(score, best),
                           "best_loss": best})
        return points

    def trial_rows(self) -> list[dict[str, Any]]:
        """Each proposed trial as the result page shows it: its parent, growths, slot, times and loss."""
        rows = []
        for trial, ev in self.proposed.items():
            attempt = self.attempts.get(trial, {})
            arch = self.archs.get(trial)
            rows.append({
                "trial": trial, "arch_hash": str(ev.get("arch_hash") or ""), "parent": ev.get("parent") or "",
                "morphisms": [g.get("kind") for g in ev.get("growths") or [] if isinstance(g, Mapping)],
                "slot": attempt.get("slot"), "status": attempt.get("status", "proposed"),
                "started_s": attempt["started"] - self.t0 if attempt.get("started") is not None else None,
                "ended_s": attempt["ended"] - self.t0 if attempt.get("ended") is not None else None,
                "best_loss": self.finished.get(trial),
                "train_flops_per_token": float(train_flops_per_token(arch, RULES).train) if arch else None,
            })
        return rows

    def checks(self) -> list[dict[str, Any]]:
        p = self.problems
        n = len(self.proposed)
        return [
            R.check("integrity.lifecycle", "every trial proposed, started, trained and finished in order", n,
                    not p["lifecycle"], "; ".join(p["lifecycle"]) or f"{n} trials in order"),
            R.check("integrity.architecture", "the seed, then children grown from their parents, started once "
                                              "their parent finished", n,
                    not p["architecture"], "; ".join(p["architecture"]) or f"{n} architectures as proposed"),
            R.check("integrity.flops", "tokens = steps x batch; FLOPs = the rules' count", self.flops,
                    not p["flops"], "; ".join(p["flops"]) or f"{self.flops:.4g} FLOPs, {self.tokens:,} tokens"),
            R.check("validity.growth", f"every growth kept its parent's function (<= {GROWTH_TOLERANCE:g})",
                    self.growths_checked, not p["growth"],
                    "; ".join(p["growth"]) or f"{self.growths_checked} growths within the tolerance"),
        ]
