"""Proof of training (docs/design.md section 7, layer 3): the service's challenge, the evidence, the audit.

- the challenge (leaderboard/pipeline.py): after a witnessed submission verifies, the service picks up
  to AIPERF_AUDIT_TRIALS of the trials whose weights the log kept, the best always among them.
- `receive_evidence`: the site uploads a challenged trial's weights (size-limited; the SHA-256 must
  be the one its log recorded).
- `run`: per challenged trial, in a subprocess with memory and time limits
  (`python -m aiperf_runner.train.reevaluate`): `audit.weights` (the stored file's digest is the logged
  one, and it is a safetensors file), `audit.architecture` (it loads with strict=True into the module
  built from the trial's graph), `audit.accuracy` (re-evaluated on the preset's validation data, or from
  rules 3.1 on a generated preset's private split, AIPERF_AUDIT_PRIVATE_SEED, it matches the trial's
  last logged accuracy within the rules table's tolerance). All pass: the result
  may enter the official division; one fails: the submission is rejected, naming the trial.
- an AIPerf-LLM result (workload llm) commits no segments: its audit is its challenged trials' weights,
  re-evaluated for their validation loss (`audit.weights`, `audit.architecture`, `audit.loss`), and a draw of
  whole trials re-executed from the start their log binds to the weights they claim (`audit.reexecute`):
  leaderboard/llmaudit.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import resource
import secrets
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiperf_runner.spec import rules as spec_rules
from aiperf_runner.spec.llmrules import audited_precision
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from leaderboard import bundles, llmaudit, pipeline, ranking, translog
from leaderboard.errors import Reason, Rejected
from leaderboard.models import Evidence, Result, StateEvidence, Submission, wanted_state_list

log = logging.getLogger(__name__)

A = Result.Audit
DEFAULT_DATA = {"fashion-mnist": "/usr/share/datasets/fashion-mnist"}


# ---- evidence --------------------------------------------------------------------------------------------
def receive_evidence(sub: Submission, trial: str, upload: Any) -> Evidence:
    """Store one challenged trial's weights; Rejected (nothing stored) when they are not what was asked for."""
    if trial not in (sub.challenge or []):
        raise Rejected("evidence", f"trial {trial!r} is not challenged (challenge: {', '.join(sub.challenge) or 'none'})",
                       status=404)
    logged = _logged(sub).get(trial, {}).get("sha256")
    folder = Path(settings.MEDIA_ROOT) / "evidence" / str(sub.pk)
    final = folder / f"{trial}.safetensors"
    size = _store_upload(upload, folder, final, logged, "audit.weights",
                         f"the one trial {trial}'s log recorded ({logged}): upload trials/{trial}/weights.safetensors")
    rel = str(final.relative_to(settings.MEDIA_ROOT))
    evidence, _ = Evidence.objects.update_or_create(submission=sub, trial=trial,
                                                    defaults={"sha256": logged, "size": size, "file": rel,
                                                              "uploaded_at": timezone.now()})
    return evidence


def receive_state(sub: Submission, sha256: str, upload: Any) -> StateEvidence:
    """Store one committed training state the audit asked for; Rejected (nothing stored) when it is not one."""
    wanted = {w["sha256"]: w["path"] for w in wanted_state_list(sub.proof)}
    if sha256 not in wanted:
        raise Rejected("evidence", f"state {sha256[:16]}... is not one the audit asked for ({len(wanted)} asked)",
                       status=404)
    folder = Path(settings.MEDIA_ROOT) / "evidence" / str(sub.pk) / "states"
    final = folder / f"{sha256}.safetensors"
    size = _store_upload(upload, folder, final, sha256, "audit.state",
                         f"the digest asked for: upload {wanted[sha256]}")
    rel = str(final.relative_to(settings.MEDIA_ROOT))
    evidence, _ = StateEvidence.objects.update_or_create(submission=sub, sha256=sha256, defaults={
        "size": size, "file": rel, "uploaded_at": timezone.now()})
    return evidence


def _store_upload(upload: Any, folder: Path, final: Path, expected: str | None, check: str, wanted: str) -> int:
    """An upload into `final` once its SHA-256 is `expected` (size-limited; nothing left behind otherwise);
    `wanted` says what it should have been, in the refusal."""
    limit = settings.AIPERF_MAX_EVIDENCE_BYTES
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{final.name}.{secrets.token_hex(4)}.tmp"
    digest, size = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out:
            for chunk in upload.chunks():
                size += len(chunk)
                if size > limit:
                    raise Rejected("size", f"an upload of {size}+ bytes: over this service's limit of {limit} bytes "
                                           "(AIPERF_MAX_EVIDENCE_BYTES)", status=413)
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != expected:
            raise Rejected(check, f"the upload's SHA-256 {digest.hexdigest()} is not {wanted}")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return size


def complete(sub: Submission) -> bool:
    """Every challenged trial's weights and every committed state asked for are here."""
    have = set(Evidence.objects.filter(submission=sub).values_list("trial", flat=True))
    states = set(StateEvidence.objects.filter(submission=sub).values_list("sha256", flat=True))
    asked = bool(sub.challenge) or bool(sub.proof)
    return asked and set(sub.challenge) <= have and set(sub.states_wanted()) <= states


def _logged(sub: Submission) -> dict[str, Any]:
    result = Result.objects.filter(submission=sub).only("report").first()
    return dict((result.report or {}).get("kept_weights") or {}) if result else {}


# ---- the audit ------------------------------------------------------------------------------------------------
def data_dir(preset: str) -> tuple[str | None, str | None]:
    """(the service's validation data for the preset, why there is none): smoke needs none."""
    if preset == "smoke":
        return None, None
    path = settings.AIPERF_AUDIT_DATA.get(preset) or DEFAULT_DATA.get(preset)
    if not path or not Path(path).exists():
        return None, (f"this service has no validation data for preset {preset!r} (AIPERF_AUDIT_DATA); "
                      "the audit waits until an operator provides it")
    return str(path), None


def _limits() -> None:
    memory = settings.AIPERF_AUDIT_MEMORY_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def evaluate(trial_dir: Path, weights: Path, data: str | None, preset: str, private: bool = False) -> dict[str, Any]:
    """The subprocess's verdict on one trial's weights or committed state (its error as `error` when it could
    not run); `private`: a generated preset on the service's private split."""
    return _reevaluated(["aiperf_runner.train.reevaluate", str(trial_dir), str(weights), "--preset", preset,
                         "--device", settings.AIPERF_AUDIT_DEVICE] + (["--data", data] if data else [])
                        + (["--private-seed", str(settings.AIPERF_AUDIT_PRIVATE_SEED)] if private else []))


def _reevaluated(argv: list[str]) -> dict[str, Any]:
    """A re-evaluation program's verdict; one that did not run (it crashed, ran out of time) fails the
    architecture with its error."""
    verdict = _subprocess(argv)
    if "architecture_ok" not in verdict:
        verdict = {"architecture_ok": False, "error": f"the re-evaluation: {verdict.get('error')}"}
    return verdict


def trial_checks(trial: str, weights: Path, logged: dict[str, Any], verdict: dict[str, Any],
                 rules_version: str) -> list[dict[str, Any]]:
    """audit.weights, audit.architecture and audit.accuracy of one trial: the stored weights, what its log
    recorded (`kept_weights` of the report) and the re-evaluation's verdict (`evaluate`)."""
    th = spec_rules.thresholds(rules_version)
    checks = file_checks(trial, weights, logged, verdict, "graph")
    arch_ok = checks[-1]["passed"]
    measured, claimed = verdict.get("accuracy"), logged.get("val_accuracy")
    if not arch_ok or measured is None or claimed is None:
        checks.append(spec_rules.check("audit.accuracy", None, measured, False,
                                       f"trial {trial}: not re-evaluated ({verdict.get('error') or 'no accuracy'})"))
        return checks
    tolerance = spec_rules.audit_tolerance(claimed, int(verdict.get("images") or logged.get("images_evaluated") or 1), th,
                                           _other_images(verdict, logged.get("images_evaluated")))
    ok = abs(measured - claimed) <= tolerance
    checks.append(spec_rules.check("audit.accuracy", tolerance, measured - claimed, ok,
                                   f"trial {trial}: re-evaluated accuracy {measured:.4f} on {verdict.get('images')} "
                                   f"images{_of_split(verdict)}, logged {claimed:.4f} (tolerance {tolerance:.4f})"))
    return checks


def file_checks(trial: str, weights: Path, logged: dict[str, Any], verdict: dict[str, Any],
                built_from: str) -> list[dict[str, Any]]:
    """audit.weights and audit.architecture of one trial, either workload's: the stored file's digest against
    the logged one, the re-evaluation's verdict on the file and its fit (the module built from its
    `built_from`: the image trial's graph, the LLM trial's architecture)."""
    stored = hashlib.sha256(weights.read_bytes()).hexdigest()
    checks = [spec_rules.check("audit.weights", logged.get("sha256"), stored, stored == logged.get("sha256"),
                               f"trial {trial}: weights.safetensors has the SHA-256 its log recorded"
                               if stored == logged.get("sha256") else
                               f"trial {trial}: the stored weights' SHA-256 {stored} is not the logged one")]
    weights_bad = (verdict.get("error") or "").startswith("weights:")
    checks[0]["passed"] = checks[0]["passed"] and not weights_bad
    if weights_bad:
        checks[0]["message"] = f"trial {trial}: {verdict['error']}"
    arch_ok = bool(verdict.get("architecture_ok"))
    checks.append(spec_rules.check("audit.architecture", "strict", arch_ok, arch_ok,
                                   f"trial {trial}: every tensor of the weights fits the module built from its "
                                   f"{built_from}" if arch_ok else
                                   f"trial {trial}: {verdict.get('error') or 'not checked'}"))
    return checks


def _other_images(verdict: dict[str, Any], logged_images: Any) -> int | None:
    """The log's evaluated images where the re-evaluation measured others (a private split)."""
    return int(logged_images or 1) if verdict.get("split") == "private" else None


PRESET_DATA = " of the preset's data"


def _of_split(verdict: dict[str, Any], otherwise: str = "") -> str:
    return " of the service's private split (no runner reads it)" if verdict.get("split") == "private" else otherwise


def private_split(rules_version: str) -> bool:
    """Whether the rules evaluate a generated preset on the service's private split (3.1 on)."""
    return bool(spec_rules.thresholds(rules_version).get("audit_private_split"))


def _subprocess(argv: list[str]) -> dict[str, Any]:
    """One audit program's verdict (its last line of output), in a subprocess with the audit's limits."""
    try:
        out = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                             timeout=settings.AIPERF_AUDIT_TIMEOUT_S, preexec_fn=_limits,
                             env={**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")})
    except subprocess.TimeoutExpired:
        return {"error": f"it ran past {settings.AIPERF_AUDIT_TIMEOUT_S:.0f} s"}
    try:
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {"error": f"it failed (exit {out.returncode}): {out.stderr.strip()[-500:]}"}


def replay_check(seg: dict[str, Any], verdict: dict[str, Any], tolerance: float) -> dict[str, Any]:
    """audit.replay of one segment, from train/segment.py's verdict."""
    where = (f"trial {seg['trial']} epoch {seg['epoch']} steps {seg['first'] + 1}-{seg['last']} on "
             f"{seg['world']} rank(s)")
    ratio, ok = verdict.get("ratio"), bool(verdict.get("passed"))
    if isinstance(ratio, float) and not math.isfinite(ratio):
        ratio = None  # a runner of before 5 December said infinity for a segment that did not move
    if verdict.get("error"):
        message = f"{where}: not re-executed ({verdict['error']})"
    elif verdict.get("exact"):
        message = f"{where}: re-executed to the committed state exactly"
    elif ratio is None:
        message = (f"{where}: the committed states did not move over these steps, and re-executing them moved the "
                   f"state by {float(verdict.get('distance') or 0):.3g}: the committed work is not what the segment does")
        ok = False
    else:
        message = (f"{where}: re-executed to {ratio:.3g} of the segment's own move away from the committed state "
                   f"(tolerance {tolerance:g})" + ("" if ok else ": the committed work is not what the segment does"))
    return spec_rules.check("audit.replay", tolerance, ratio, ok, message)


def proof_checks(proof: dict[str, Any], states: dict[str, Path], root: Path, data: str | None, preset: str,
                 precision: str, rules_version: str, seconds: dict[str, float]) -> dict[str, Any]:
    """The committed work re-executed: every drawn segment of `proof` (`audit.replay`) and the best
    checkpoint's accuracy (`audit.best`), from the uploaded `states` (digest -> file) and the bundle's
    trials at `root`; their times into `seconds`."""
    th = spec_rules.thresholds(rules_version)
    tolerance = spec_rules.replay_tolerance(th, precision)
    segments: dict[str, list[dict[str, Any]]] = {}
    drawn = list(proof.get("segments") or [])
    if drawn:
        plan = {"preset": preset, "data": data, "device": settings.AIPERF_AUDIT_DEVICE, "tolerance": tolerance,
                "segments": [{**seg, "trial_dir": str(root / "trials" / seg["trial"]),
                              "start_file": str(states[seg["start"]]), "end_file": str(states[seg["end"]])}
                             for seg in drawn]}
        plan_file = root / "audit-plan.json"
        plan_file.write_text(json.dumps(plan))
        started = time.perf_counter()
        out = _subprocess(["aiperf_runner.train.segment", "--plan", str(plan_file)])
        verdicts = out.get("verdicts") or [{"passed": False, "error": out.get("error") or "no verdict"}] * len(drawn)
        seconds["segments"] = round(time.perf_counter() - started, 3)
        for seg, verdict in zip(drawn, verdicts, strict=False):
            segments[f"{seg['trial']}/{seg['epoch']}/{seg['last']}"] = [replay_check(seg, verdict, tolerance)]
        log.info("%d segments re-executed in %.1f s", len(drawn), seconds["segments"])
    best: list[dict[str, Any]] = []
    cp = proof.get("best")
    if cp:
        started = time.perf_counter()
        verdict = evaluate(root / "trials" / cp["trial"], states[cp["sha256"]], data, preset,
                           private_split(rules_version))
        claimed = float(cp["val_accuracy"])
        measured = verdict.get("accuracy")
        tol = spec_rules.audit_tolerance(claimed, int(verdict.get("images") or cp["images_evaluated"] or 1), th,
                                         _other_images(verdict, cp["images_evaluated"]))
        ok = measured is not None and abs(float(measured) - claimed) <= tol
        where = f"trial {cp['trial']} epoch {cp['epoch']} (the run's best accuracy)"
        best.append(spec_rules.check(
            "audit.best", tol, None if measured is None else float(measured) - claimed, ok,
            f"{where}: not re-evaluated ({verdict.get('error') or 'no accuracy'})" if measured is None else
            f"{where}: re-evaluated accuracy {float(measured):.4f} on {verdict.get('images')} images"
            f"{_of_split(verdict, PRESET_DATA)}, logged {claimed:.4f} (tolerance {tol:.4f})"))
        seconds["best"] = round(time.perf_counter() - started, 3)
    return {"segments": segments, "best": best, "drawn_from": proof.get("of"), "committed": proof.get("committed")}


def run(submission_id: int, *, again: bool = False) -> str:
    """Audit a submission's challenged trials; the result's audit state afterwards. An audit already
    decided (passed or failed) is not run again unless `again` (`manage.py aiperf_audit`): the broker
    delivers a message again when its task outlasts the visibility timeout, and each delivery would
    otherwise re-evaluate every trial, ahead of the audits queued after it."""
    sub = Submission.objects.get(pk=submission_id)
    result = Result.objects.filter(submission=sub).first()
    if result is None or not (sub.challenge or sub.proof):
        return "nothing to audit"
    if result.audit in (A.PASSED, A.FAILED) and not again:
        log.info("submission %s: audit already %s (a repeated delivery); not run again", sub.pk, result.audit)
        return str(result.audit)
    if not complete(sub):
        return A.PENDING
    # An LLM result has its own audit (leaderboard/llmaudit.py): a byte preset's text is made by the re-evaluation
    # itself, a shard preset's validation shards are the service's (AIPERF_AUDIT_DATA) as images' are.
    llm = result.workload == Result.Workload.LLM
    data, missing = (None, None) if llm and not llmaudit.shard_preset(result.preset) else data_dir(result.preset)
    if missing:
        _set(result, A.PENDING, {"message": missing})
        return A.PENDING
    if not _start_attempt(result, again):
        return A.PENDING
    seconds: dict[str, float] = {}
    with bundles.extracted(sub.bundle.path) as root:
        if llm:
            proposed = llmaudit.proposals(root)  # the verified log's lines, never the run's own trial.json
            trials, missing = _llm_trials(sub, result, root, data, proposed, seconds)
            work: dict[str, Any] = {}
            if missing is None:  # no committed segments: whole trials are re-executed instead
                work, missing = _llm_work(sub, result, root, data, proposed, seconds)
        else:
            trials = _image_trials(sub, result, root, data, seconds)
            states = {e.sha256: Path(e.file.path) for e in StateEvidence.objects.filter(submission=sub)}
            work = proof_checks(sub.proof or {}, states, root, data, result.preset, result.precision,
                                result.rules_version, seconds)
    if missing:
        _set(result, A.PENDING, {"message": missing})
        return A.PENDING
    report: dict[str, Any] = {"trials": trials, "seconds": seconds, **work}
    failed = [c for checks in [*trials.values(), *work.get("segments", {}).values(), work.get("best", []),
                               *work.get("reexecuted", {}).values()]
              for c in checks if not c["passed"]]
    if failed:
        reasons: list[Reason] = [{"check": c["name"], "message": c["message"]} for c in failed]
        _fail(sub, result, report, reasons)
        return A.FAILED
    _set(result, A.PASSED, report)
    return A.PASSED


def _image_trials(sub: Submission, result: Result, root: Path, data: str | None,
                  seconds: dict[str, float]) -> dict[str, list[dict[str, Any]]]:
    """Each challenged image trial's checks (`trial_checks`); their times into `seconds`."""
    logged = dict(result.report.get("kept_weights") or {})
    trials: dict[str, list[dict[str, Any]]] = {}
    for trial in sub.challenge:
        evidence = Evidence.objects.get(submission=sub, trial=trial)
        started = time.perf_counter()
        verdict = evaluate(root / "trials" / trial, Path(evidence.file.path), data, result.preset,
                           private_split(result.rules_version))
        trials[trial] = trial_checks(trial, Path(evidence.file.path), logged.get(trial, {}), verdict,
                                     result.rules_version)
        seconds[trial] = round(time.perf_counter() - started, 3)
        log.info("submission %s: audit of trial %s took %.1f s", sub.pk, trial, seconds[trial])
    return trials


def _llm_trials(sub: Submission, result: Result, root: Path, data: str | None, proposed: dict[str, dict[str, Any]],
                seconds: dict[str, float]) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """Each challenged AIPerf-LLM trial's audit.weights, audit.architecture and audit.loss (leaderboard/llmaudit.py),
    each loaded into the architecture its `trial_proposed` line (`proposed`) gives; their times into `seconds`; and
    why the audit cannot conclude on this service (None when it can)."""
    logged = dict(result.report.get("kept_weights") or {})
    trials: dict[str, list[dict[str, Any]]] = {}
    for trial in sub.challenge:
        weights = Path(Evidence.objects.get(submission=sub, trial=trial).file.path)
        started = time.perf_counter()
        verdict = (_reevaluated(llmaudit.argv(root, trial, proposed[trial].get("arch"), weights, result.preset,
                                              settings.AIPERF_AUDIT_DEVICE, data))
                   if trial in proposed else llmaudit.unproposed(trial))
        if verdict.get("data_error"):
            return trials, llmaudit.no_data(result.preset, verdict["data_error"], sub.pk)
        trials[trial] = (file_checks(trial, weights, logged.get(trial, {}), verdict, "architecture")
                         + [llmaudit.loss_check(trial, logged.get(trial, {}), verdict)])
        seconds[trial] = round(time.perf_counter() - started, 3)
        log.info("submission %s: audit of LLM trial %s took %.1f s", sub.pk, trial, seconds[trial])
    return trials, None


def _llm_work(sub: Submission, result: Result, root: Path, data: str | None, proposed: dict[str, dict[str, Any]],
              seconds: dict[str, float]) -> tuple[dict[str, Any], str | None]:
    """The drawn AIPerf-LLM trials re-executed (leaderboard/llmaudit.py `draw`): `audit.reexecute` of each, at the
    precision the judged system allows (spec/llmrules.py `audited_precision`: the run's claim only on a system with
    accelerators), their times into `seconds`; and why the audit cannot conclude on this service (None when it
    can)."""
    proof = sub.proof or {}
    drawn = list(proof.get("reexecute") or [])
    if not drawn:
        return {}, None
    states = {e.sha256: Path(e.file.path) for e in StateEvidence.objects.filter(submission=sub)}
    precision = audited_precision(result.precision, result.system.accelerator_count if result.system else 0)
    reexecuted: dict[str, list[dict[str, Any]]] = {}
    for entry in drawn:
        started = time.perf_counter()
        plan = llmaudit.reexecute_plan(root, entry, states, proposed, result.preset, precision,
                                       settings.AIPERF_AUDIT_DEVICE, data)
        verdict = _subprocess([llmaudit.REEXECUTE, str(plan)]) if plan else llmaudit.not_drawn(entry)
        if verdict.get("data_error"):
            return {}, llmaudit.no_data(result.preset, verdict["data_error"], sub.pk)
        reexecuted[entry["trial"]] = [llmaudit.reexecute_check(entry, verdict, precision)]
        seconds[f"reexecute {entry['trial']}"] = round(time.perf_counter() - started, 3)
        log.info("submission %s: LLM trial %s re-executed in %.1f s", sub.pk, entry["trial"],
                 seconds[f"reexecute {entry['trial']}"])
    return {"reexecuted": reexecuted, "drawn_from": proof.get("of"), "finished": proof.get("finished")}, None


def _start_attempt(result: Result, again: bool) -> bool:
    """Count a delivery that starts the audit's work; False (the audit left pending, with why) past
    AIPERF_AUDIT_MAX_ATTEMPTS: a task that kills its worker is delivered again by the broker, without end."""
    if again:
        Result.objects.filter(pk=result.pk).update(audit_attempts=1)
        return True
    Result.objects.filter(pk=result.pk).update(audit_attempts=F("audit_attempts") + 1)
    attempts = Result.objects.values_list("audit_attempts", flat=True).get(pk=result.pk)
    limit = settings.AIPERF_AUDIT_MAX_ATTEMPTS
    if attempts <= limit:
        return True
    message = (f"the audit was started {attempts - 1} times and never finished (its worker died or was stopped: a "
               f"service fault, not the site's); a list maintainer must look: manage.py aiperf_audit --submission "
               f"{result.submission_id}")
    log.error("submission %s: %s", result.submission_id, message)
    _set(result, A.PENDING, {"message": message})
    return False


def _finite(value: Any) -> Any:
    """`value` with every infinite or NaN float as None: PostgreSQL's JSON holds neither, and one of them
    in a report failed every delivery of the audit's task (its report was never stored)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _set(result: Result, state: str, report: dict[str, Any]) -> None:
    report = _finite(report)
    with transaction.atomic():
        Result.objects.filter(pk=result.pk).update(audit=state, audit_report=report, audited_at=timezone.now())
        ranking.rerank()
        translog.record(result, "audited", reason=str(report.get("message") or ""))


def _fail(sub: Submission, result: Result, report: dict[str, Any], reasons: list[Reason]) -> None:
    """A failed audit rejects the result, as a failed verification would (no result rows, the reasons kept). The
    audit's verdict and the rejection are one transaction: a site polling its submission never reads a failed
    audit on a submission still `verified` (its `submit` took that for the final word)."""
    token = pipeline.claim(sub.pk, reverify=True)
    with transaction.atomic():
        _set(result, A.FAILED, report)
        if token is not None:
            pipeline._store_rejection(sub, token, reasons)
    if token is None:
        log.warning("submission %s: audit failed but the submission is claimed; the sweep will retry", sub.pk)


def expire() -> list[int]:
    """Submissions whose challenge went unanswered for AIPERF_CHALLENGE_DAYS: withdrawn."""
    cutoff = timezone.now() - timedelta(days=settings.AIPERF_CHALLENGE_DAYS)
    out = []
    for sub in Submission.objects.filter(challenged_at__lt=cutoff, result__audit=A.PENDING):
        if not complete(sub) and pipeline.withdraw(sub, reason="the challenge was not answered in time"):
            Submission.objects.filter(pk=sub.pk).update(reasons=[{
                "check": "audit.challenge", "message": f"the challenge of {sub.challenged_at:%Y-%m-%d} was not "
                                                       f"answered within {settings.AIPERF_CHALLENGE_DAYS:g} days"}])
            out.append(sub.pk)
    return out
