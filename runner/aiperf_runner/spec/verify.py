"""Verification of a run directory or bundle: integrity, score recomputed, rules (docs/rules.md).

`verify(path, pubkey=None, rules=None) -> dict` is what `aiperf-runner verify --json` prints and
what the service stores as the verification report. It streams the main log once; FLOPs per image
are recomputed from each trial's graph.json with `spec.flops` (numbers the runner wrote are never
used), and every check is listed with its threshold, measured value and outcome.
"""

from __future__ import annotations

import gc
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from . import SPEC_VERSION, hardware, proof, schema
from . import rules as R
from .bound import bound_findings
from .eventlog import LogError
from .fastfold import Fold
from .fingerprint import EpochFingerprints
from .hardware import efficiency, run_peak  # noqa: F401 - re-exported: the service imports them from here
from .procpool import SharedPool
from .proof import CommitmentAudit
from .replay import Replay
from .retention import RetentionAudit
from .retention import share as retention_share
from .runio import RunDir, RunIOError
from .scoring import DEFAULT_RULES, RULES, ScoreAccumulator, Series, check_rules
from .witness import ServiceRecords, WitnessAudit, token_interval, token_issued_at

REPORT_FIELDS = ("integrity_ok", "rules", "score_ops", "regulated_score_ops", "max_accuracy", "duration_s",
                 "trials_finished", "epochs", "checks", "run_id", "fingerprint", "division", "series",
                 "valid", "stable", "plausible", "spec_version", "rules_version", "rejected", "peak_flops",
                 "efficiency", "system", "epoch_fingerprints", "kept_weights", "best_trial")

BUNDLE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.zst", ".tar.xz", ".tar.bz2")

_SIGNATURE_WORDS = ("signature", "signed", "public_key", "fingerprint", "MANIFEST.sig")

FAST_FOLD = True
"""Fold the log as scanned chunks (spec/fastfold.py); False: line by line, in this process (the
reference tests compare it with)."""


def verify(path: str | Path, pubkey: Any = None, rules: str | None = None, *,
           require_signature: bool = False, rules_version: str | None = None,
           workers: int | None = None, system: Mapping[str, Any] | None = None,
           witness_keys: Mapping[str, bytes] | None = None, records: ServiceRecords | None = None) -> dict[str, Any]:
    """Verify a run directory or a bundle (.tar.gz); see docs/internals.md, "Verification".

    `pubkey`: the key the result must be signed with (anything `keys.load_public_key` accepts).
    `rules`: FLOP rules to score with ("v2" / "v1-compat"); default: the run's own.
    `rules_version`: the rules to check under; default: the version the run declares (`rules.declared_version`),
    the current one if it declares none that is known.
    `require_signature`: an unsigned run fails integrity (the service sets it; local runs need not).
    `workers`: processes for reading the trials' files and analysing their graphs, and for reading
    a large log in chunks (default: one per CPU; at most 4 for the log; 1 = none). Runs with few
    trials or distinct architectures, logs under 64 MiB, and callers that cannot start processes,
    do this work in-process.
    `system`: the service's registration of the run's system (spec/hardware.py); without it the
    run's own hardware facts stand in and `system.registered` fails.
    `witness_keys`: {fingerprint: raw public key} of the service's witness keys (current and retired);
    without them the `witness.*` checks cannot be made. `records`: what the service knows of the
    run's token and receipts (spec/witness.py, the service passes it).
    Raises FileNotFoundError for a missing path and ValueError for unknown `rules`; everything wrong
    with the run itself is reported in the checks instead.
    """
    pubkey, path = _arguments(path, pubkey, rules, rules_version)
    if path.is_dir():
        return _llm_report(path, pubkey, require_signature, system, witness_keys, records, rules_version) or \
            _verify_dir(path, pubkey, rules, require_signature, rules_version, workers, system, witness_keys,
                        records).report
    from .bundle import BundleError, safe_extract

    with tempfile.TemporaryDirectory(prefix="aiperf-verify-") as tmp:
        root = Path(tmp) / "run"
        try:
            safe_extract(path, root)
        except BundleError as exc:
            report = _empty_report(rules or DEFAULT_RULES, rules_version or R.RULES_VERSION)
            report["checks"] = [R.check("integrity.bundle", "a readable tar of regular files within the limits",
                                        None, False, str(exc))]
            return report
        return _llm_report(root, pubkey, require_signature, system, witness_keys, records, rules_version) or \
            _verify_dir(root, pubkey, rules, require_signature, rules_version, workers, system, witness_keys,
                        records).report


def _llm_report(root: Path, pubkey: Any, require_signature: bool, registration: Mapping[str, Any] | None = None,
                witness_keys: Mapping[str, bytes] | None = None, records: ServiceRecords | None = None,
                rules_version: str | None = None) -> dict[str, Any] | None:
    """The report of an AIPerf-LLM run (spec/llmverify.py); None for any other run. `rules_version` (image rules)
    gives the witness's thresholds."""
    from .llmrules import is_llm

    try:
        run = RunDir(root).run
    except RunIOError:
        return None
    if not is_llm(run):
        return None
    from .llmverify import verify_llm

    checks, fingerprint = _signature_checks(root, pubkey, require_signature)
    return verify_llm(root, run, checks, fingerprint, registration=registration, witness_keys=witness_keys,
                      records=records, witness_rules=rules_version)


class Verified(NamedTuple):
    """A verification's report, with the fold of the main log it was made from and the run
    directory (the service stores per-trial figures from them: the log is read once). An AIPerf-LLM
    run has no image replay (None): its report carries its per-trial rows (`trials`)."""

    report: dict[str, Any]
    replay: Replay | None
    run_dir: RunDir


def verify_run(path: str | Path, pubkey: Any = None, rules: str | None = None, *,
               require_signature: bool = False, rules_version: str | None = None,
               workers: int | None = None, system: Mapping[str, Any] | None = None,
               witness_keys: Mapping[str, bytes] | None = None, records: ServiceRecords | None = None) -> Verified:
    """`verify` of a run directory (not a bundle: NotADirectoryError), with its replay and RunDir."""
    pubkey, path = _arguments(path, pubkey, rules, rules_version)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a run directory")
    llm = _llm_report(path, pubkey, require_signature, system, witness_keys, records, rules_version)
    if llm is not None:
        return Verified(llm, None, RunDir(path))
    return _verify_dir(path, pubkey, rules, require_signature, rules_version, workers, system, witness_keys,
                       records)


def _arguments(path: str | Path, pubkey: Any, rules: str | None, rules_version: str | None) -> tuple[Any, Path]:
    """The checked arguments of `verify`: (the public key loaded, the path, which exists)."""
    if rules is not None:
        check_rules(rules)
    if rules_version is not None:
        R.thresholds(rules_version)
    if pubkey is not None:
        from . import keys

        pubkey = keys.load_public_key(pubkey)  # KeyFileError (a ValueError) if it is not a key
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    return pubkey, path


def _empty_report(rules: str, rules_version: str, spec_version: Any = SPEC_VERSION) -> dict[str, Any]:
    return {"integrity_ok": False, "rules": rules, "score_ops": 0.0, "regulated_score_ops": 0.0,
            "max_accuracy": 0.0, "duration_s": 0.0, "trials_finished": 0, "epochs": 0, "checks": [],
            "run_id": None, "fingerprint": None, "division": "open", "series": [], "valid": False,
            "stable": False, "plausible": False, "spec_version": spec_version, "rules_version": rules_version,
            "rejected": True, "peak_flops": None, "efficiency": None, "system": None, "epoch_fingerprints": [],
            "kept_weights": {}, "best_trial": None}


def _signature_checks(root: Path, pubkey: Any, require: bool) -> tuple[list[dict[str, Any]], str | None]:
    from . import bundle

    if not (root / bundle.MANIFEST_NAME).exists():
        return [R.check_signature(False, [], require, None), R.check_manifest_digests(False, [], require)], None
    findings = bundle.check_manifest(root, pubkey)
    try:
        manifest = bundle.read_manifest(root)
    except bundle.BundleError as exc:
        return [R.check_signature(True, [str(exc)], require, None),
                R.check_manifest_digests(True, [str(exc)], require)], None
    sig = [f for f in findings if any(w in f for w in _SIGNATURE_WORDS)]
    files = [f for f in findings if f not in sig]
    fingerprint = manifest.get("fingerprint") if not sig else None
    return [R.check_signature(True, sig, require, fingerprint), R.check_manifest_digests(True, files, require)], \
        fingerprint


def _verify_dir(root: Path, pubkey: Any, rules: str | None, require_signature: bool,
                rules_version: str | None, workers: int | None = None,
                registration: Mapping[str, Any] | None = None, witness_keys: Mapping[str, bytes] | None = None,
                records: ServiceRecords | None = None) -> Verified:
    run_dir = RunDir(root)
    run, run_problems = _read_run(run_dir)
    rules_version = rules_version or R.version_of(run)
    th = R.thresholds(rules_version)
    if rules is None:
        run_rules = run.get("rules")
        rules = run_rules if run_rules in RULES else DEFAULT_RULES
    spec_version = run.get("spec_version")
    report = _empty_report(rules, rules_version, spec_version if isinstance(spec_version, str) else None)
    report["run_id"] = run.get("run_id")
    sig_checks, report["fingerprint"] = _signature_checks(root, pubkey, require_signature)
    precision = run.get("precision")
    hw = hardware.hardware_of(run, registration)
    peak, how = hw.peak(precision, th.get("cpu_clock_ghz"))
    f = _fold(run, run_dir, rules, th, hw.slot_peak(peak), workers, witness_keys)
    checks = [*_integrity_checks(f, run, run_problems, sig_checks, run_dir, th),
              *_validity_checks(f, run, rules, precision, th),
              R.check_stability(f.series.points, th),
              *_plausibility_checks(f, run, precision, peak, how, th)]
    if R.in_force("system.", th):  # rules 2.0 on
        checks += [*_system_checks(f, run, hw, peak, how, precision, th),
                   *_witness_checks(f, run, th, witness_keys, records)]
    checks = [c for c in checks if R.in_force(c["name"], th)]
    for c in checks:
        c["measured"] = _json_safe(c["measured"])
    _fill_report(report, checks, f, hw, peak, th)
    return Verified(report, f.replay, run_dir)


def _read_run(run_dir: RunDir) -> tuple[dict[str, Any], list[str]]:
    """run.json and what is missing or mistyped in it ({} and why, when it cannot be read)."""
    try:
        run = run_dir.run
        return run, schema.for_version(run.get("spec_version")).run_json_problems(run)
    except RunIOError as exc:
        return {}, [str(exc)]


@dataclass
class _Folded:
    """The main log folded: the replay, its listeners and what went wrong reading it."""

    replay: Replay
    acc: ScoreAccumulator
    audit: R.LogAudit
    fingerprints: EpochFingerprints
    seen: hardware.SeenAccelerators
    witness: WitnessAudit
    retention: RetentionAudit
    commitments: CommitmentAudit
    graph_errors: R.Findings
    last_line: int
    chain_error: str | None
    series: Series


class _TrialFlops:
    """FLOPs per image of each trial, recomputed from its graph.json (spec/runio.py), as the score
    and the audit ask for them; a graph's problems are findings at the line being folded."""

    def __init__(self, run_dir: RunDir, rules: str, replay: Replay) -> None:
        self.run_dir, self.rules, self.replay = run_dir, rules, replay
        self.errors = R.Findings()
        self.fold: Fold | None = None  # set once the fold exists: the line it is at
        self._pairs: dict[int, tuple[float, float]] = {}  # one (train, eval) tuple per FlopCounts: trials share them

    def _pair(self, counts: Any) -> tuple[float, float]:
        pair = self._pairs.get(id(counts))
        if pair is None:
            pair = self._pairs[id(counts)] = float(counts.train), float(counts.eval)
        return pair

    def flops_for(self, trial: str) -> tuple[float, float] | None:
        assert self.fold is not None
        try:
            counts = self.run_dir.trial_flops(trial, self.rules)
        except RunIOError as exc:
            self.errors.add(self.fold.line, str(exc))
            return None
        proposed = self.replay.trials.get(trial)
        actual = self.run_dir.arch(trial).arch_hash
        if proposed is not None and proposed.arch_hash != actual:
            self.errors.add(self.fold.line, f"trials/{trial}/graph.json hashes to {actual}, the log's "
                                            f"trial_proposed says {proposed.arch_hash}")
        return self._pair(counts)

    def peek(self, trial: str) -> tuple[float, float] | None:
        """What flops_for returns, without recording anything (the fast fold plans with it)."""
        try:
            counts = self.run_dir.trial_flops(trial, self.rules)
        except RunIOError:
            return None
        return self._pair(counts)


def _fold(run: Mapping[str, Any], run_dir: RunDir, rules: str, th: Mapping[str, Any],
          slot_peak: Callable[[int], float | None], workers: int | None, witness_keys: Mapping[str, bytes] | None) -> _Folded:
    """Read the trials' files and fold the main log into a replay and its listeners."""
    replay = Replay()
    flops = _TrialFlops(run_dir, rules, replay)
    # One pool for the trials' files and then the log: its workers start once.
    shared = SharedPool(workers if workers is not None else (os.cpu_count() or 1))
    preset = run.get("preset")
    run_dir.prefetch(rules, workers, preset=preset if isinstance(preset, str) else None, shared=shared)
    acc = ScoreAccumulator(rules, flops.flops_for, replay)  # listens first: the audit reads its FLOPs
    audit = R.LogAudit(run, th, replay, flops_for=acc.trial_flops, slot_peak=slot_peak)
    fingerprints = EpochFingerprints()
    replay.listen(fingerprints)
    seen = hardware.SeenAccelerators()
    replay.listen(seen)
    witness = WitnessAudit(replay, witness_keys or {})
    retention = RetentionAudit(replay, retention_share(th, run.get("preset")))
    commitments = CommitmentAudit(replay, proof.every_steps(th, run.get("preset")))
    fold = flops.fold = Fold(audit, acc, fingerprints, seen, witness, flops.peek)
    chain_error = _fold_log(run_dir, fold, workers, shared)
    audit.finish()
    return _Folded(replay, acc, audit, fingerprints, seen, witness, retention, commitments, flops.errors, fold.line,
                   chain_error, acc.series())


def _fold_log(run_dir: RunDir, fold: Fold, workers: int | None, shared: SharedPool) -> str | None:
    """Every line of the main log into `fold`; why the log could not be read to its end, or None."""
    # The fold allocates acyclic objects per line and keeps per-trial state: the cyclic collector's
    # passes over that state find nothing and cost about a tenth of the time on a large log.
    collecting = gc.isenabled()
    gc.disable()
    try:
        if FAST_FOLD:  # scanned chunks, plain epochs folded in one pass (spec/fastfold.py)
            for item in run_dir.scans(workers, fold.limits, shared):
                fold.take(item)
        else:  # line by line: the reference the fast fold is tested against
            for event in run_dir.events():
                fold.take((event.line, event.data))
    except LogError as exc:
        return str(exc)
    except RunIOError as exc:
        return f"cannot be read: {exc}"
    finally:
        shared.close()
        if collecting:
            gc.enable()
    return None


def _integrity_checks(f: _Folded, run: Mapping[str, Any], run_problems: list[str],
                      sig_checks: list[dict[str, Any]], run_dir: RunDir, th: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [R.check_chain(f.last_line, f.chain_error),
            *sig_checks,
            R.check_run_json(run_problems, f.audit.consistency),
            R.check_versions(run, th),
            R.check_schema(f.audit),
            R.check_graphs(f.graph_errors, f.acc.trials_with_epochs, run_dir.distinct_architectures),
            *([R.check_bound(bound_findings(run, f.replay, run_dir))] if R.in_force("integrity.bound", th) else [])]


def _validity_checks(f: _Folded, run: Mapping[str, Any], rules: str, precision: Any,
                     th: Mapping[str, Any]) -> list[dict[str, Any]]:
    preset = run.get("preset")
    return [*([R.check_rules(rules, th)] if R.in_force("validity.rules", th) else []),
            R.check_preset(preset, th),
            R.check_duration(f.series.duration_s, th),
            R.check_precision(precision, th),
            R.check_accuracy(f.series.max_accuracy, th),
            R.check_full_validation(f.audit, preset, len(f.acc.table), th),
            R.check_complete(f.replay.finished_at is not None)]


def _plausibility_checks(f: _Folded, run: Mapping[str, Any], precision: Any, peak: float | None, how: str,
                         th: Mapping[str, Any]) -> list[dict[str, Any]]:
    max_score = max((p["score"] for p in f.series.points), default=0.0)
    return [R.check_declared_peak(hardware.declared_peak(run, precision), peak, how, precision, th),
            R.check_score_peak(max_score, peak, th),
            R.check_epoch_rate(f.audit, bool(peak), th),
            R.check_epoch_images(f.audit),
            R.check_slots(f.audit),
            R.check_concurrency(f.audit),
            R.check_timestamps(f.audit),
            R.check_lifecycle(f.audit)]


def _system_checks(f: _Folded, run: Mapping[str, Any], hw: hardware.Hardware, peak: float | None, how: str,
                   precision: Any, th: Mapping[str, Any]) -> list[dict[str, Any]]:
    run_system = run.get("system") if isinstance(run.get("system"), Mapping) else {}
    assert isinstance(run_system, Mapping)
    return [R.check_registered(hw, run_system.get("id")),
            R.check_peak_known(peak, how, precision),
            R.check_devices(f.audit, hw, _dict(run.get("config")).get("devices_per_slot")),
            R.check_facts(hw, run_system, f.seen.not_registered(hw), f.seen.ranks, bool(th.get("facts_exact")))]


def _witness_checks(f: _Folded, run: Mapping[str, Any], th: Mapping[str, Any],
                    witness_keys: Mapping[str, bytes] | None, records: ServiceRecords | None) -> list[dict[str, Any]]:
    """The witness's checks, and the retention of weights it selects."""
    witness, checked = f.witness, bool(witness_keys)
    interval = token_interval(witness.token, th["heartbeat_interval_s"])
    issued_at = token_issued_at(witness.token)
    token = R.check_witness_token(witness.token_problems(run, records), checked)
    receipts = R.check_witness_receipts(witness, witness.missing_receipts(records), checked)
    coverage = R.check_witness_coverage(witness.gaps(issued_at), interval, th, checked)
    finished_with_weights = sum(1 for tr in f.replay.trials.values() if tr.weights_sha256)
    retention = R.check_retention(f.retention.problems(), len(f.retention.kept()), finished_with_weights)
    timeline = R.check_witness_timeline(
        witness.timeline_problems(f.acc.t0, f.acc.end, issued_at, th["witness_tolerance_s"],
                                  th["witness_duration_relative"]), checked, th)
    commitments = R.check_commitments(f.commitments.problems(), f.commitments.every, f.commitments.segment_count())
    return [token, receipts, coverage, retention, commitments, timeline]  # commitments: 3.0 on (in_force)


def _fill_report(report: dict[str, Any], checks: list[dict[str, Any]], f: _Folded, hw: hardware.Hardware,
                 peak: float | None, th: Mapping[str, Any]) -> None:
    """The report's fields from the checks and the fold."""
    series, replay, retention, seen = f.series, f.replay, f.retention, f.seen
    report.update({
        "integrity_ok": R.all_passed(checks, "integrity"),
        "score_ops": series.score,
        "regulated_score_ops": series.regulated,
        "max_accuracy": series.max_accuracy,
        "duration_s": series.duration_s,
        "trials_finished": f.acc.trials_finished,
        "epochs": len(f.acc.table),
        "checks": checks,
        "division": "official" if R.official(checks, th) else "open",
        "series": series.points,
        "valid": R.all_passed(checks, "validity"),
        "stable": R.all_passed(checks, "stability"),
        "plausible": R.all_passed(checks, "plausibility"),
        "rejected": bool(R.blocking(checks)),
        "peak_flops": peak,
        "efficiency": series.score / peak if peak else None,
        "system": {"registered": hw.registered, "id": hw.system_id, "name": hw.name,
                   "accelerator_model": hw.accelerator_model, "accelerators": hw.accelerators, "nodes": hw.nodes,
                   "describe": hw.describe(),
                   # What the trials ran on, and where it is not the registration's (system.facts fails then).
                   "accelerators_seen": seen.ranks, "accelerators_not_registered": seen.not_registered(hw)},
        "epoch_fingerprints": f.fingerprints.digests,
        "kept_weights": {t: {"sha256": sha, "epoch": replay.trials[t].last_epoch,
                             "val_accuracy": replay.trials[t].last_accuracy,
                             "images_evaluated": replay.trials[t].last_evaluated}
                         for t, sha in retention.kept().items()},
        "best_trial": retention.best_trial(),
    })


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else ("-inf" if v < 0 else None)
    return v


def is_bundle_name(path: str | Path) -> bool:
    return str(path).endswith(BUNDLE_SUFFIXES)
