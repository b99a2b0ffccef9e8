"""The verification pipeline of one submission (run by the Celery task in leaderboard/tasks.py).

integrity -> schema -> recompute (aiperf_runner.spec.verify) -> rules -> result + report -> rank -> status.
A bundle that fails is a `leaderboard.errors.Rejected`, stored as the submission's reasons.

Safe to run twice and safe after a worker dies mid-way:

- a run starts with a *conditional claim*: one UPDATE that moves the submission from `received`
  (or from a `verifying` claim older than AIPERF_CLAIM_TIMEOUT_S, left by a dead worker) to
  `verifying` with a fresh claim token. Whoever does not win the UPDATE does nothing;
- everything the run writes (Result, its series and trials, the status) is written in one
  transaction that first checks the claim token is still its own, with update_or_create, so any
  number of runs leaves exactly one Result;
- nothing before that transaction writes to the database, so a run killed anywhere leaves the
  submission `verifying` with a claim that goes stale and is taken over by the redelivered task.

Every figure stored comes from `aiperf_runner.spec`: the report of `verify()`, FLOPs per image
from `spec.runio`, peaks from `spec.peaks`. Nothing here recomputes a score.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import random
import secrets
import statistics
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiperf_runner
from aiperf_runner.spec import SPEC_VERSION, peaks
from aiperf_runner.spec import proof as spec_proof
from aiperf_runner.spec import rules as spec_rules
from aiperf_runner.spec.llmrules import is_llm
from aiperf_runner.spec.replay import Replay
from aiperf_runner.spec.runio import RunDir, RunIOError
from aiperf_runner.spec.verify import verify_run
from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Count, F, Max, ProtectedError, Q
from django.utils import timezone

from leaderboard import bundles, llmaudit, ranking, systems, translog, witness
from leaderboard.errors import Reason, Rejected
from leaderboard.models import EpochFingerprint, Result, ResultSeries, Submission, System, Trial

log = logging.getLogger(__name__)

# Bump PIPELINE_VERSION when this module changes what it stores; the runner and spec versions
# cover changes to the checks and the score. `aiperf_reverify` re-verifies results whose
# verifier_version differs from VERIFIER_VERSION.
PIPELINE_VERSION = "4"  # 4: the workload and best loss (AIPerf-LLM); 3: validity.admitted, the rules version kept
# The spec's rules version counts too: a new one re-verifies every stored result (docs/service.md, "Upgrading").
VERIFIER_VERSION = (f"runner-{aiperf_runner.__version__}+spec-{SPEC_VERSION}+rules-{spec_rules.RULES_VERSION}"
                    f"+pipeline-{PIPELINE_VERSION}")

DUPLICATE_SHARED = 3  # epoch-sample digests shared with another submission that make a log a copy of it

S = Submission.Status


@dataclass
class Outcome:
    status: str  # what happened: verified, rejected, skipped (claimed elsewhere or already done)
    submission_id: int
    reasons: list[Reason] = field(default_factory=list)
    busy_until: datetime | None = None  # skipped because another worker holds a fresh claim


class ClaimLost(Exception):
    """Another worker took the submission over (our claim went stale); our work is discarded."""


def _step(name: str, submission_id: int) -> None:
    log.debug("submission %s: %s", submission_id, name)


# ---- claim -------------------------------------------------------------------------------------
def claim(submission_id: int, *, reverify: bool = False) -> str | None:
    """Take the submission for this run; the claim token, or None when someone else has it / it is done."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.AIPERF_CLAIM_TIMEOUT_S)
    free = Q(claim_token="") | Q(claimed_at__isnull=True) | Q(claimed_at__lt=stale)
    token = uuid.uuid4().hex
    if reverify:
        cond = Q(status__in=[S.VERIFIED, S.PUBLISHED]) & free
        updates: dict[str, Any] = {}
    else:
        cond = Q(status=S.RECEIVED) | (Q(status=S.VERIFYING) & free)
        updates = {"status": S.VERIFYING}
    won = Submission.objects.filter(pk=submission_id).filter(cond).update(
        claim_token=token, claimed_at=now, attempts=F("attempts") + 1, **updates)
    return token if won else None


def release(submission_id: int, token: str, *, reverify: bool = False, error: str = "") -> None:
    """Give a claim back after an unexpected error (`error`: what it was), so that a retry may claim it at once."""
    updates = {} if reverify else {"status": S.RECEIVED}
    Submission.objects.filter(pk=submission_id, claim_token=token).update(
        claim_token="", claimed_at=None, error=error[:2000], **updates)


def _failed(submission_id: int, token: str, exc: BaseException, *, reverify: bool) -> None:
    """A run stopped by a fault of the service (database restarted, disk full): say why and give the claim back.

    The connection may be the casualty (PostgreSQL restarted under it): drop it if unusable, so the
    release opens a new one, for a few seconds while a restarting database comes back. If it stays
    away the claim stays, goes stale after AIPERF_CLAIM_TIMEOUT_S and beat's resume_stuck queues the
    submission again all the same.
    """
    error = f"{type(exc).__name__}: {exc}".strip()
    log.error("submission %s: verification failed on a service error, to be retried: %s", submission_id, error)
    for wait in RELEASE_WAITS_S:
        time.sleep(wait)
        try:
            connection.close_if_unusable_or_obsolete()
            release(submission_id, token, reverify=reverify, error=error)
            return
        except DatabaseError as db_exc:
            problem = db_exc
    log.error("submission %s: could not release its claim (%s); the sweep takes it over once stale",
              submission_id, problem)


RELEASE_WAITS_S = (0.0, 1.0, 2.0, 4.0)  # between tries to give a claim back after a database error


# ---- the run -----------------------------------------------------------------------------------
def run(submission_id: int, *, reverify: bool = False) -> Outcome:
    token = claim(submission_id, reverify=reverify)
    if token is None:
        sub = Submission.objects.filter(pk=submission_id).first()
        busy = None
        if sub is not None and sub.claim_token and sub.claimed_at and (
                sub.status == S.VERIFYING or (reverify and sub.status in (S.VERIFIED, S.PUBLISHED))):
            busy = sub.claimed_at + timedelta(seconds=settings.AIPERF_CLAIM_TIMEOUT_S)
        return Outcome("skipped", submission_id, busy_until=busy)
    try:
        sub = Submission.objects.select_related("site", "key").get(pk=submission_id)
        try:
            started = time.perf_counter()
            stored = _verify(sub)
            log.info("submission %s: verified in %.1f s", submission_id, time.perf_counter() - started)
            _store_result(sub, token, stored, reverify=reverify)
        except Rejected as exc:
            _store_rejection(sub, token, exc.reasons)
            log.info("submission %s rejected: %s", submission_id, exc)
            return Outcome(S.REJECTED, submission_id, exc.reasons)
        return Outcome(S.VERIFIED, submission_id)
    except ClaimLost:
        log.warning("submission %s: claim lost to another worker; discarding this run", submission_id)
        return Outcome("skipped", submission_id)
    except Exception as exc:
        _failed(submission_id, token, exc, reverify=reverify)
        raise
    except BaseException:  # the worker shutting down (SystemExit, KeyboardInterrupt): no fault to report
        release(submission_id, token, reverify=reverify)
        raise


def _verify(sub: Submission) -> dict[str, Any]:
    """Everything that reads the bundle; returns what _store_result writes. Writes nothing."""
    _step("integrity", sub.pk)
    key = sub.key
    if key is None:
        raise Rejected("integrity.key", "the submission has no registered signing key")
    if key.revoked:
        raise Rejected("integrity.key", f"key {key.fingerprint} was revoked on {key.revoked_at:%Y-%m-%d %H:%M} UTC")
    if not sub.bundle.name:
        raise Rejected("integrity.bundle", "the stored bundle is missing")
    path = sub.bundle.path
    try:
        with bundles.extracted(path) as root:
            manifest, fingerprint = bundles.manifest_key(root)
            if fingerprint != key.fingerprint:
                raise Rejected("integrity.signature", f"signed by {fingerprint}, expected {key.fingerprint}")
            if manifest["run_id"] != sub.run_id:
                raise Rejected("integrity.run_id", f"run id {manifest['run_id']} differs from the "
                                                   f"submission's {sub.run_id}")

            _step("schema", sub.pk)
            run_dir = RunDir(root)
            try:
                run_json = run_dir.run
            except RunIOError as exc:
                raise Rejected("integrity.run_json", str(exc)) from None

            _step("recompute", sub.pk)
            system = registered_system(sub, run_json)
            records, _attempt = witness.records(sub.run_id, sub.site, sub.pk)
            llm = is_llm(run_json)  # AIPerf-LLM: its own rules (spec/llmverify.py); the service's image rules
            # give only its witness's thresholds
            # One read of the log: the report, and the replay the stored trials come from.
            version = (settings.AIPERF_RULES_VERSION or None) if llm else rules_version(sub, run_json)
            verified = verify_run(root, pubkey=base64.b64decode(key.public_key), require_signature=True,
                                  rules_version=version,
                                  system=systems.registration(system) if system else None,
                                  witness_keys=witness.public_keys(), records=records)
            report = verified.report
            if not llm:
                admit(report)

            _step("rules", sub.pk)
            reasons: list[Reason] = duplicate_of(sub, report["epoch_fingerprints"])
            reasons += [{"check": c["name"], "message": c["message"]} for c in spec_rules.blocking(report["checks"])]
            if reasons:
                raise Rejected.of(reasons)
            if not report["integrity_ok"]:
                raise Rejected("integrity", "the verification report failed integrity")
            if report["run_id"] != sub.run_id:
                raise Rejected("integrity.run_id", "the report's run id differs from the submission's")
            if verified.replay is None:
                trials = llm_trial_rows(report)
                drawn = llmaudit.draw(report, secrets.randbits(64))
            else:
                trials = _trials(verified.replay, verified.run_dir, report["rules"])
                drawn = proof_of(report, verified.run_dir)
    except Rejected as exc:
        raise exc.within("integrity") from None  # a bundle check of the upload, made again here
    return {"report": report, "run": run_json, "trials": trials, "manifest": manifest, "system": system,
            "proof": drawn}


def rules_version(sub: Submission, run: dict[str, Any]) -> str:
    """The rules a submission is verified under: those it was verified under before (a re-verification, a
    rebuild), else the service's own (AIPERF_RULES_VERSION), else those the run declares (spec/rules.py
    `declared_version`; the current ones if it declares none known)."""
    return sub.rules_version or settings.AIPERF_RULES_VERSION or spec_rules.version_of(run)


def admit(report: dict[str, Any]) -> None:
    """Add `validity.admitted` to a report: whether its rules version is one the list ranks officially
    (AIPERF_OFFICIAL_RULES). A result verified under another is listed, in the open division."""
    admitted, version = ranking.official_rules(), report["rules_version"]
    ok = version in admitted
    report["checks"].append(spec_rules.check(
        "validity.admitted", admitted, version, ok,
        f"rules {version} are admitted to the official ranking" if ok else
        f"rules {version} are not admitted to this list's official ranking (it admits {', '.join(admitted)}): "
        "listed in the open division"))
    if not ok:
        report.update(division="open", valid=False)


def registered_system(sub: Submission, run: dict[str, Any]) -> System | None:
    """The registered system of the submitting site that run.json names (`run --system`), if any."""
    facts = run.get("system") if isinstance(run.get("system"), dict) else {}
    wanted = facts.get("id") if isinstance(facts, dict) else None
    if wanted is None or not str(wanted).isdigit():
        return None
    return System.objects.filter(pk=int(wanted), site=sub.site, registered=True).first()


def duplicate_of(sub: Submission, digests: list[str]) -> list[Reason]:
    """The rejection of a log whose epoch records repeat another submission's, naming it ([] if none)."""
    if not digests:
        return []
    shared = (EpochFingerprint.objects.filter(digest__in=digests).exclude(submission=sub)
              .values("submission").annotate(n=Count("pk")).order_by("-n").first())
    if shared is None or shared["n"] < min(DUPLICATE_SHARED, len(digests)):
        return []
    other = Submission.objects.select_related("site").get(pk=shared["submission"])
    return [{"check": "integrity.duplicate", "message": f"the log repeats the epochs of submission {other.pk} "
             f"(run {other.run_id}, site {other.site.name!r}): a run is submitted once"}]


def challenge_of(report: dict[str, Any]) -> list[str]:
    """The trials whose kept weights the audit asks for: up to AIPERF_AUDIT_TRIALS, the best always among
    them, picked with the service's own randomness. None for an unwitnessed run (never official)."""
    witnessed = any(c["name"] == "witness.token" and c["passed"] for c in report["checks"])
    kept, best = dict(report.get("kept_weights") or {}), report.get("best_trial")
    if not witnessed or not kept:
        return []
    pool = sorted(t for t in kept if t != best)
    k = max(settings.AIPERF_AUDIT_TRIALS - (1 if best in kept else 0), 0)
    picked = random.Random(secrets.randbits(64)).sample(pool, min(k, len(pool)))
    return sorted(([best] if best in kept else []) + picked)


def proof_of(report: dict[str, Any], run_dir: RunDir) -> dict[str, Any]:
    """The work the audit re-executes (spec/proof.py): the rules' `audit_segments` of the committed segments
    the beacons kept, drawn with the service's own randomness, weighted by the work the log claims for them,
    and the checkpoint of the run's best accuracy. {} for a run that is not witnessed or commits nothing
    (never official)."""
    passed = {c["name"] for c in report["checks"] if c["passed"]}
    committed = any(c["name"] == "audit.commitments" and c["passed"] and c["threshold"] is not None
                    for c in report["checks"])
    if "witness.token" not in passed or not committed:
        return {}
    th = spec_rules.thresholds(report["rules_version"])
    preset = run_dir.run.get("preset")
    claimed = spec_proof.claimed((event.data for event in run_dir.events()), spec_proof.keep_share(th, preset))
    flops = {}
    for trial in {s.trial for s in claimed.kept}:
        try:
            flops[trial] = float(run_dir.trial_flops(trial, report["rules"]).train)
        except RunIOError:
            flops[trial] = 0.0
    picked = spec_proof.pick(claimed.kept, int(th["audit_segments"]), secrets.randbits(64), flops=flops)
    return {"segments": [s.as_dict() for s in picked], "best": claimed.best.as_dict() if claimed.best else None,
            "of": len(claimed.kept), "committed": len(claimed.segments)}


def review_needed(result_values: dict[str, Any], accelerator_model: str, exclude: int | None) -> str:
    """Why an official result must wait for a list maintainer ('' when it need not)."""
    eff = result_values.get("efficiency")
    if result_values["division"] != "official" or not eff:
        return ""
    version = result_values["rules_version"]
    # An AIPerf-LLM result (rules llm-v1) is held to the service's image rules' review thresholds.
    th = spec_rules.thresholds(version if version in spec_rules.THRESHOLDS else
                               settings.AIPERF_RULES_VERSION or spec_rules.RULES_VERSION)
    if "review_efficiency_max" not in th:  # rules 1.0: no review
        return ""
    if eff > th["review_efficiency_max"]:
        return f"efficiency {eff:.1%} of peak is above {th['review_efficiency_max']:.0%}"
    others = Result.objects.live().filter(division="official", system__accelerator_model=accelerator_model,
                                          workload=result_values.get("workload", Result.Workload.IMAGE))
    if exclude is not None:
        others = others.exclude(pk=exclude)
    if "review_efficiency_vs_median" in th:  # rules 3.0: the model's measured efficiencies
        measured = [e for e in others.values_list("efficiency", flat=True) if e is not None]
        if len(measured) < th["review_min_measured"]:
            return ""
        median = statistics.median(measured)
        factor = th["review_efficiency_vs_median"]
        return (f"efficiency {eff:.1%} is more than {factor}x the median of the {len(measured)} official results "
                f"on {accelerator_model} ({median:.1%})") if eff > factor * median else ""
    best = others.aggregate(best=Max("efficiency"))["best"]
    if best and eff > th["review_efficiency_vs_best"] * best:
        return (f"efficiency {eff:.1%} is more than {th['review_efficiency_vs_best']}x the best official result on "
                f"{accelerator_model} ({best:.1%})")
    return ""


STORED_STATUS = {"retry": "failed"}  # a retry the run never got to: failed, as the timeline shows it


def _trials(replay: Replay, run_dir: RunDir, rules: str) -> list[dict[str, Any]]:
    """Per-trial summaries for the charts, from the verified main log's replay (verify's own fold:
    the log is not read again) and the FLOPs verify counted."""
    t0 = replay.first_t or 0.0
    out = []
    for tr in replay.trials.values():
        last = tr.attempts[-1] if tr.attempts else None
        summary: dict[str, Any] = {
            "trial": tr.trial, "arch_hash": tr.arch_hash, "parent": tr.parent or "", "morphisms": tr.morphisms,
            "round": tr.round, "status": STORED_STATUS.get(tr.status, tr.status), "epochs": tr.last_epoch,
            "slot": last.slot if last else None, "started_s": last.started - t0 if last else None,
            "ended_s": tr.ended_t - t0 if tr.ended_t is not None else None,
            "best_accuracy": tr.best_accuracy if tr.status == "finished" else tr.epoch_best,
        }
        try:
            counts = run_dir.trial_flops(tr.trial, rules)
            summary["train_flops_per_image"], summary["eval_flops_per_image"] = float(counts.train), float(counts.eval)
        except RunIOError:
            pass
        out.append(summary)
    return out


def llm_trial_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """An AIPerf-LLM run's per-trial rows, as its report gives them (spec/llmverify.py); FLOPs per token."""
    return [{"trial": t["trial"], "arch_hash": t["arch_hash"], "parent": t["parent"], "morphisms": t["morphisms"],
             "slot": t["slot"], "status": STORED_STATUS.get(t["status"], t["status"]), "started_s": t["started_s"],
             "ended_s": t["ended_s"], "best_loss": t["best_loss"], "train_flops_per_image": t["train_flops_per_token"]}
            for t in report.get("trials", [])]


# ---- storing -----------------------------------------------------------------------------------
def _locked(sub: Submission, token: str) -> Submission:
    current = Submission.objects.select_for_update().get(pk=sub.pk)
    if current.claim_token != token:
        raise ClaimLost()
    return current


def _system(sub: Submission, run: dict[str, Any]) -> System:
    facts: dict[str, Any] = run["system"] if isinstance(run.get("system"), dict) else {}
    model = str(facts.get("accelerator_model") or "cpu")
    known = peaks.lookup(model)
    values = {
        "vendor": known.vendor if known else str(facts.get("vendor") or ("CPU" if model == "cpu" else "")),
        "accelerator_model": model,
        "accelerator_count": int(facts.get("accelerator_count") or 0),
        "nodes": int(facts.get("nodes") or 1),
        "interconnect": str(facts.get("interconnect") or ""),
        "cpu_model": str(facts.get("cpu_model") or ""),
        "cpu_cores": int(facts.get("cpu_cores") or 0),
    }
    identity = "|".join(str(values[k]) for k in ("accelerator_model", "accelerator_count", "nodes",
                                                 "interconnect", "cpu_model", "cpu_cores"))
    system, _ = System.objects.get_or_create(
        site=sub.site, identity=hashlib.sha256(identity.encode()).hexdigest(),
        defaults={**values, "name": str(facts.get("name") or ""),
                  "peak_flops": run.get("declared_peak_flops") if isinstance(run.get("declared_peak_flops"), dict)
                  else {}})
    return system


def _started_at(run: dict[str, Any]) -> datetime | None:
    created = run.get("created_at")
    if isinstance(created, (int, float)) and not isinstance(created, bool):
        return datetime.fromtimestamp(created, tz=UTC)
    return None


SOFTWARE = ("torch", "cuda", "python", "os")


def software(run: dict[str, Any]) -> dict[str, str]:
    """The software stack run.json records (the site's statement: shown, never judged)."""
    system = run.get("system") if isinstance(run.get("system"), dict) else {}
    stack = {k: str(system[k]) for k in SOFTWARE if isinstance(system, dict) and system.get(k) not in (None, "")}
    if run.get("runner_version"):
        stack["runner"] = str(run["runner_version"])
    return stack


TUNING = ("precision", "data_decoder", "decoded_at_staging", "data_workers", "channels_last", "torch_compile",
          "cuda_graphs")


def tuning(run: dict[str, Any]) -> dict[str, Any]:
    """The closed division's knobs as run.json records them (`tuning`; its top-level `data_decoder` for a run
    that has no block): shown with the result, never judged."""
    recorded = run.get("tuning")
    block: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    if not block and run.get("data_decoder"):
        block = {"precision": run.get("precision"), "data_decoder": run.get("data_decoder")}
    return {k: block[k] for k in TUNING if isinstance(block.get(k), (str, bool, int)) and block.get(k) != ""}


def witnessed(report: dict[str, Any]) -> bool:
    """Whether the service witnessed the run: its token and its receipts passed."""
    passed = {c["name"] for c in report.get("checks", []) if c.get("passed")}
    return {"witness.token", "witness.receipts"} <= passed


def result_values(report: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The figures a Result stores, from the service's verification report and the run's run.json."""
    return {
        "workload": Result.Workload.LLM if report.get("workload") == "llm" else Result.Workload.IMAGE,
        "best_loss": report.get("best_loss"),
        "division": report["division"],
        "preset": str(run.get("preset") or ""),
        "precision": str(run.get("precision") or ""),
        "score_ops": report["score_ops"],
        "regulated_score_ops": report["regulated_score_ops"],
        "max_accuracy": report["max_accuracy"],
        "duration_s": report["duration_s"],
        "rules": report["rules"],
        "peak_flops": report["peak_flops"],
        "efficiency": report["efficiency"],
        "trials_finished": report["trials_finished"],
        "epochs": report["epochs"],
        "rules_version": report["rules_version"],
        "spec_version": report["spec_version"],
        "runner_version": str(run.get("runner_version") or ""),
        "verifier_version": VERIFIER_VERSION,
        "verification_level": Result.Level.FULL if report["valid"] and report["stable"] else Result.Level.PARTIAL,
        "witnessed": witnessed(report),
        "report": {k: v for k, v in report.items() if k not in ("series", "trials")} | {"rules_used": report["rules"],
                                                                          "software": software(run),
                                                                          "tuning": tuning(run)},
        "started_at": _started_at(run),
    }


def _store_result(sub: Submission, token: str, stored: dict[str, Any], *, reverify: bool) -> None:
    _step("result", sub.pk)
    report, run = stored["report"], stored["run"]
    now = timezone.now()
    with transaction.atomic():
        current = _locked(sub, token)
        publish = not settings.AIPERF_REQUIRE_APPROVAL and not current.rehearsal  # a rehearsal: its site's only
        system = stored["system"] or _system(current, run)
        values = {"site": current.site, "system": system, "run_id": current.run_id,
                  **result_values(report, run), "verified_at": now}
        existing = Result.objects.filter(submission=current).first()
        if existing is None:
            values |= {"published": publish, "published_at": now if publish else None}
        if existing is None or existing.review in (Result.Review.NONE, Result.Review.PENDING):
            why = "" if current.rehearsal else review_needed(values, system.accelerator_model,
                                                              existing.pk if existing else None)
            values |= {"review": Result.Review.PENDING if why else Result.Review.NONE, "review_reason": why}
        if existing is None or existing.audit == Result.Audit.NONE:
            current.challenge = challenge_of(report)
            current.proof = stored.get("proof") or {}
            asked = bool(current.challenge or current.proof)
            current.challenged_at = now if asked else None
            values["audit"] = Result.Audit.PENDING if asked else Result.Audit.NONE
        current.rules_version = report["rules_version"]
        result, _ = Result.objects.update_or_create(submission=current, defaults=values)
        EpochFingerprint.objects.filter(submission=current).delete()
        try:
            with transaction.atomic():
                EpochFingerprint.objects.bulk_create(
                    EpochFingerprint(digest=d, submission=current) for d in set(report["epoch_fingerprints"]))
        except IntegrityError:  # another submission of the same epochs committed meanwhile
            raise Rejected.of(duplicate_of(current, report["epoch_fingerprints"]) or [
                {"check": "integrity.duplicate", "message": "the log repeats another submission's epochs"}]) from None
        ResultSeries.objects.update_or_create(result=result, defaults={"points": report["series"]})
        result.trials.all().delete()
        Trial.objects.bulk_create((Trial(result=result, **t) for t in stored["trials"]), batch_size=2000)
        if not reverify:
            current.status = S.VERIFIED
        current.reasons = []
        current.verified_at = now
        current.claim_token = ""
        current.claimed_at = None
        current.error = ""
        current.save(update_fields=["status", "reasons", "verified_at", "claim_token", "claimed_at", "updated_at",
                                    "challenge", "proof", "challenged_at", "error", "rules_version"])
        ranking.rerank()
        translog.record(result, "reverified" if existing is not None else "accepted")


def _store_rejection(sub: Submission, token: str, reasons: list[Reason]) -> None:
    """Rejected: no result, trials or series, no bundle file; the row keeps the reasons."""
    _step("reject", sub.pk)
    with transaction.atomic():
        current = _locked(sub, token)
        result = Result.objects.filter(submission=current).first()
        result_id, kept = (result.pk if result is not None else None), False
        if result is not None:
            try:
                with transaction.atomic():
                    result.delete()
            except ProtectedError:  # cited by a frozen edition: keep it, off the live list
                Result.objects.filter(pk=result.pk).update(published=False)
                kept = True
            ranking.rerank()
        EpochFingerprint.objects.filter(submission=current).delete()
        name = current.bundle.name
        current.status = S.REJECTED
        current.reasons = reasons
        current.bundle = ""
        current.claim_token = ""
        current.claimed_at = None
        current.error = ""
        current.save(update_fields=["status", "reasons", "bundle", "claim_token", "claimed_at", "updated_at",
                                    "error"])
        if result_id is not None:  # the list's log: the row as it stands now, or gone
            why = "; ".join(r["message"] for r in reasons)[:500]
            if result is not None and kept:
                translog.record(result, "rejected", reason=why)
            else:
                translog.record_removed([result_id], "rejected", why)
        if name:
            storage = current.bundle.storage
            transaction.on_commit(lambda: storage.delete(name))


# ---- admin actions -----------------------------------------------------------------------------
def publish(submission: Submission, by: str = "") -> bool:
    """Put a verified result on the live list (the admin's approval); never a rehearsal's."""
    with transaction.atomic():
        n = Result.objects.filter(submission=submission, submission__status__in=[S.VERIFIED, S.PUBLISHED],
                                  submission__rehearsal=False).update(published=True, published_at=timezone.now())
        if n:
            Submission.objects.filter(pk=submission.pk).update(status=S.PUBLISHED, updated_at=timezone.now())
            ranking.rerank()
            translog.record(submission.result, "published", by=by)
    return bool(n)


def withdraw(submission: Submission, by: str = "", reason: str = "") -> bool:
    """Take a result off the live list (it stays in frozen editions)."""
    with transaction.atomic():
        Result.objects.filter(submission=submission).update(published=False)
        n = Submission.objects.filter(pk=submission.pk, status__in=[S.VERIFIED, S.PUBLISHED]).update(
            status=S.WITHDRAWN, updated_at=timezone.now())
        ranking.rerank()
        result = Result.objects.filter(submission=submission).first()
        if result is not None:
            translog.record(result, "withdrawn", by=by, reason=reason)
    return bool(n)


def review(result: Result, approve: bool, reason: str, by: str) -> None:
    """A list maintainer's decision on a result waiting in review (recorded and shown with the result)."""
    with transaction.atomic():
        Result.objects.filter(pk=result.pk).update(
            review=Result.Review.APPROVED if approve else Result.Review.REJECTED, review_reason=reason,
            reviewed_at=timezone.now(), reviewed_by=by)
        ranking.rerank()
        translog.record(result, "reviewed", by=by, reason=reason)


def needs_reverify():
    """Submissions whose result was verified by another verifier version."""
    return Submission.objects.filter(status__in=[S.VERIFIED, S.PUBLISHED]).exclude(
        result__verifier_version=VERIFIER_VERSION)


MAX_ATTEMPTS = 5


def stuck():
    """Submissions no task is working on: received long ago, or verifying under a stale claim.

    One that failed MAX_ATTEMPTS times (an error in the service, not in the bundle: those are
    rejections) is left for an admin to look at and re-verify.
    """
    now = timezone.now()
    stale = now - timedelta(seconds=settings.AIPERF_CLAIM_TIMEOUT_S)
    waited = now - timedelta(seconds=settings.AIPERF_RESUME_RECEIVED_AFTER_S)
    return Submission.objects.filter(Q(status=S.RECEIVED, created_at__lt=waited)
                                     | Q(status=S.VERIFYING, claimed_at__lt=stale)).filter(attempts__lt=MAX_ATTEMPTS)
