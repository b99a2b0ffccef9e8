"""Proof of training (docs/design.md section 7, layer 3): the service's challenge, the evidence, the audit.

- the challenge (leaderboard/pipeline.py): after a witnessed submission verifies, the service picks up
  to AIPERF_AUDIT_TRIALS of the trials whose weights the log kept, the best always among them.
- `receive_evidence`: the site uploads a challenged trial's weights (size-limited; the SHA-256 must
  be the one its log recorded).
- `run`: per challenged trial, in a subprocess with memory and time limits
  (`python -m aiperf_runner.train.reevaluate`): `audit.weights` (the stored file's digest is the logged
  one, and it is a safetensors file), `audit.architecture` (it loads with strict=True into the module
  built from the trial's graph), `audit.accuracy` (re-evaluated on the preset's validation data, it
  matches the trial's last logged accuracy within the rules table's tolerance). All pass: the result
  may enter the official division; one fails: the submission is rejected, naming the trial.
"""

from __future__ import annotations

import hashlib
import json
import logging
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
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from leaderboard import bundles, pipeline, ranking, translog
from leaderboard.errors import Reason, Rejected
from leaderboard.models import Evidence, Result, Submission

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
    limit = settings.AIPERF_MAX_EVIDENCE_BYTES
    folder = Path(settings.MEDIA_ROOT) / "evidence" / str(sub.pk)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{trial}.{secrets.token_hex(4)}.tmp"
    digest, size = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out:
            for chunk in upload.chunks():
                size += len(chunk)
                if size > limit:
                    raise Rejected("size", f"weights of {size}+ bytes: over this service's limit of {limit} bytes "
                                           "(AIPERF_MAX_EVIDENCE_BYTES)", status=413)
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != logged:
            raise Rejected("audit.weights", f"the upload's SHA-256 {digest.hexdigest()} is not the one trial {trial}'s "
                                            f"log recorded ({logged}): upload trials/{trial}/weights.safetensors")
        final = folder / f"{trial}.safetensors"
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    rel = str(final.relative_to(settings.MEDIA_ROOT))
    evidence, _ = Evidence.objects.update_or_create(submission=sub, trial=trial,
                                                    defaults={"sha256": logged, "size": size, "file": rel,
                                                              "uploaded_at": timezone.now()})
    return evidence


def complete(sub: Submission) -> bool:
    """Every challenged trial's weights are here."""
    have = set(Evidence.objects.filter(submission=sub).values_list("trial", flat=True))
    return bool(sub.challenge) and set(sub.challenge) <= have


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


def evaluate(trial_dir: Path, weights: Path, data: str | None, preset: str) -> dict[str, Any]:
    """The subprocess's verdict on one trial (its error as `error` when it could not run)."""
    argv = [sys.executable, "-m", "aiperf_runner.train.reevaluate", str(trial_dir), str(weights), "--preset", preset,
            "--device", settings.AIPERF_AUDIT_DEVICE] + (["--data", data] if data else [])
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=settings.AIPERF_AUDIT_TIMEOUT_S,
                             preexec_fn=_limits, env={**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get(
                                 "CUDA_VISIBLE_DEVICES", "")})
    except subprocess.TimeoutExpired:
        return {"architecture_ok": False, "error": f"the re-evaluation ran past {settings.AIPERF_AUDIT_TIMEOUT_S:.0f} s"}
    try:
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {"architecture_ok": False, "error": f"the re-evaluation failed (exit {out.returncode}): "
                                                   f"{out.stderr.strip()[-500:]}"}


def trial_checks(trial: str, weights: Path, logged: dict[str, Any], verdict: dict[str, Any],
                 rules_version: str) -> list[dict[str, Any]]:
    """audit.weights, audit.architecture and audit.accuracy of one trial: the stored weights, what its log
    recorded (`kept_weights` of the report) and the re-evaluation's verdict (`evaluate`)."""
    th = spec_rules.thresholds(rules_version)
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
                                   f"trial {trial}: every tensor of the weights fits the module built from its graph"
                                   if arch_ok else f"trial {trial}: {verdict.get('error') or 'not checked'}"))
    measured, claimed = verdict.get("accuracy"), logged.get("val_accuracy")
    if not arch_ok or measured is None or claimed is None:
        checks.append(spec_rules.check("audit.accuracy", None, measured, False,
                                       f"trial {trial}: not re-evaluated ({verdict.get('error') or 'no accuracy'})"))
        return checks
    tolerance = spec_rules.audit_tolerance(claimed, int(verdict.get("images") or logged.get("images_evaluated") or 1), th)
    ok = abs(measured - claimed) <= tolerance
    checks.append(spec_rules.check("audit.accuracy", tolerance, measured - claimed, ok,
                                   f"trial {trial}: re-evaluated accuracy {measured:.4f} on {verdict.get('images')} "
                                   f"images, logged {claimed:.4f} (tolerance {tolerance:.4f})"))
    return checks


def run(submission_id: int, *, again: bool = False) -> str:
    """Audit a submission's challenged trials; the result's audit state afterwards. An audit already
    decided (passed or failed) is not run again unless `again` (`manage.py aiperf_audit`): the broker
    delivers a message again when its task outlasts the visibility timeout, and each delivery would
    otherwise re-evaluate every trial, ahead of the audits queued after it."""
    sub = Submission.objects.get(pk=submission_id)
    result = Result.objects.filter(submission=sub).first()
    if result is None or not sub.challenge:
        return "nothing to audit"
    if result.audit in (A.PASSED, A.FAILED) and not again:
        log.info("submission %s: audit already %s (a repeated delivery); not run again", sub.pk, result.audit)
        return str(result.audit)
    if not complete(sub):
        return A.PENDING
    data, missing = data_dir(result.preset)
    if missing:
        _set(result, A.PENDING, {"message": missing})
        return A.PENDING
    logged = dict(result.report.get("kept_weights") or {})
    trials: dict[str, list[dict[str, Any]]] = {}
    seconds: dict[str, float] = {}
    with bundles.extracted(sub.bundle.path) as root:
        for trial in sub.challenge:
            evidence = Evidence.objects.get(submission=sub, trial=trial)
            started = time.perf_counter()
            verdict = evaluate(root / "trials" / trial, Path(evidence.file.path), data, result.preset)
            trials[trial] = trial_checks(trial, Path(evidence.file.path), logged.get(trial, {}), verdict,
                                         result.rules_version)
            seconds[trial] = round(time.perf_counter() - started, 3)
            log.info("submission %s: audit of trial %s took %.1f s", sub.pk, trial, seconds[trial])
    report = {"trials": trials, "seconds": seconds}
    failed = [c for checks in trials.values() for c in checks if not c["passed"]]
    if failed:
        reasons: list[Reason] = [{"check": c["name"], "message": c["message"]} for c in failed]
        _set(result, A.FAILED, report)
        _reject(sub, reasons)
        return A.FAILED
    _set(result, A.PASSED, report)
    return A.PASSED


def _set(result: Result, state: str, report: dict[str, Any]) -> None:
    with transaction.atomic():
        Result.objects.filter(pk=result.pk).update(audit=state, audit_report=report, audited_at=timezone.now())
        ranking.rerank()
        translog.record(result, "audited", reason=str(report.get("message") or ""))


def _reject(sub: Submission, reasons: list[Reason]) -> None:
    """A failed audit rejects the result, as a failed verification would (no result rows, the reasons kept)."""
    token = pipeline.claim(sub.pk, reverify=True)
    if token is None:
        log.warning("submission %s: audit failed but the submission is claimed; the sweep will retry", sub.pk)
        return
    pipeline._store_rejection(sub, token, reasons)


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
