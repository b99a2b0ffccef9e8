"""The rules a result must pass (docs/design.md section 5; operator-facing text in docs/rules.md).

Every check returns one dict `{name, threshold, measured, passed, message}`; the list of them is
the verification report. Names are `<group>.<check>` with group one of `GROUPS`. Thresholds live in
ONE versioned table, `THRESHOLDS[RULES_VERSION]`; changing a number means a new rules version
(results carry the version they were checked under). A failed check of `BLOCKING` rejects a result;
any other failed check keeps it out of the official division (`division`).

What the checks measure in the event log is gathered by `audit.LogAudit` in one streaming pass
over the log's replay (spec/replay.py); the event schema is spec/schema.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from . import presetfacts
from .logaudit import MAX_MESSAGES, Findings, LogAudit
from .peaks import PRECISIONS
from .schema import run_json_problems

__all__ = ["RULES_VERSION", "THRESHOLDS", "thresholds", "check", "group", "all_passed", "run_json_problems",
           "Findings", "LogAudit"]

RULES_VERSION = "3.1"
"""3.1: a system is held to what the run found it is (`system.facts`: the registration's CPU model, cores,
nodes and accelerator count against run.json's), a CPU's peak is at the rules' clock, never one read from
its model's name, and smoke's accuracies are audited on a private split. 3.0: the work is committed as it
is done (`audit.commitments`: every counted epoch's training state every `commit_every_steps` steps,
spec/proof.py), so that the service can re-execute it. 2.0:
registered systems (`system.*`), bound rules (`integrity.bound`), `v2` only and stability required
for the official division. 1.0: the first rules."""

GROUPS = ("integrity", "validity", "stability", "plausibility", "system", "witness", "audit")
BLOCKING = ("integrity.", "plausibility.", "system.devices", "witness.receipts", "witness.timeline")
"""Checks (by name prefix) whose failure rejects a result: the log is broken or claims the impossible."""

THRESHOLDS: dict[str, dict[str, Any]] = {
    # 1.0, as released (30 November 2026): the run's own declared peak, no registered systems, no witness;
    # official = integrity and validity passed.
    "1.0": {
        # integrity
        "spec_versions": ["1"],
        "flop_rules": ["v2", "v1-compat"],
        # validity (official division)
        "official_preset": "imagenet",
        "min_duration_s": 3600.0,
        "precisions": list(PRECISIONS),
        "min_max_accuracy": 0.70,
        "imagenet_val_images": 50_000,
        # stability
        "stability_window": 0.5,      # the last half of the run
        "max_score_cv": 0.10,         # coefficient of variation of the score series in the window
        "min_stability_points": 3,
        # plausibility
        "max_score_to_peak": 1.0,     # score <= declared peak
        "max_epoch_to_peak": 1.0,     # an epoch's FLOP/s <= its slot's share of the declared peak
        "max_declared_to_table": 1.25,  # declared peak <= 1.25 x the table's peak for the model
        "clock_skew_s": 60.0,         # trial clocks vs the controller's
        "epoch_images_slack": 0.01,   # images trained per epoch <= train_images x (1 + slack) + pad
        "epoch_images_pad": 1024,
    },
}
# 2.0: 1.0 (the preset's validation set held by spec/presetfacts.py for every preset), with registered systems,
# the witness, the weights kept for the audit, review, and `v2` only in the official division.
THRESHOLDS["2.0"] = {
    **{k: v for k, v in THRESHOLDS["1.0"].items() if k != "imagenet_val_images"},
    "spec_versions": ["1", "2"],  # as released: "1"; spec 2 only adds the rules version a run declares
    "official_rules": "v2",
    # witness (the service's receipts)
    "heartbeat_interval_s": 60.0,         # the default interval a run token sets
    "heartbeat_interval_bounds": [5.0, 300.0],
    "witness_max_gap_intervals": 5,       # longest stretch without a receipt, in heartbeat intervals
    "witness_tolerance_s": 60.0,          # the controller's clock against the service's
    "witness_duration_relative": 0.01,    # the log's duration may differ from the witnessed by 1 % (+ tolerance)
    # proof of training: kept weights and the service's audit
    "weights_keep_share": {"imagenet": 0.01, "default": 0.05},  # share of trials whose weights a beacon keeps
    "audit_accuracy_fixed": 0.01,         # re-evaluated accuracy may differ by this
    "audit_accuracy_sigmas": 3.0,         # ... plus this many binomial standard deviations
    # review by a list maintainer before publication (the service)
    "review_efficiency_vs_best": 1.25,  # x the best official efficiency on the same accelerator model
    "review_efficiency_max": 0.6,       # of peak, outright
}
# 3.0: 2.0 and proof of the work (spec/proof.py). A segment of `commit_every_steps` steps is what the
# service's audit re-executes. Short, because training amplifies rounding: on the smoke network a replay
# on another thread count ended up to 0.017 of a 16-step segment's move away from the committed state,
# up to 0.5 of a 64-step one's, while a quarter of a segment's steps left out puts it 0.36 or more away.
# A draw of `audit_segments` catches a run that skipped a quarter of its work with 99 % probability
# (segments_needed(0.25, 0.99) = 17). A witnessed run keeps the states of a share of its segments only
# (the next receipt's beacon decides, after they are committed), the service draws from those.
THRESHOLDS["3.0"] = {
    # The review band is the list's own measure of a model: a result is held when its efficiency exceeds
    # the median of the model's official results by this factor (with enough of them), not the best
    # earlier one, which a first inflated result would have raised for every later one.
    **{k: v for k, v in THRESHOLDS["2.0"].items() if k != "review_efficiency_vs_best"},
    "review_efficiency_vs_median": 1.5,
    "review_min_measured": 3,
    "commit_every_steps": {"default": 16},
    "states_keep_share": {"imagenet": 0.02, "default": 0.05},  # of the segments, by the next receipt's beacon
    "audit_segments": 17,
    "audit_skip_detected": [0.25, 0.99],  # the share of skipped work caught, with this probability
    # How far a re-executed segment may end from the committed state, relative to how far the segment
    # moved it (train/segment.py `ratio`). On another thread count (as on another CPU) fashion-mnist's
    # 16-step segments ended up to 0.067 away, a quarter of their steps left out 0.374 or more
    # (bench/audit_cost.py). Other precisions, and a GPU's run re-executed on CPUs, are provisional
    # until measured on the accelerators the list ranks.
    "audit_replay_tolerance": {"default": 0.2},
}
# 3.1: 3.0, with the registration held to the run's own facts. Under 3.0 a CPU system's peak came from the
# clock its model's name stated ("Imaginary CPU @ 350GHz" made a peak 100 x the machine's), and a
# registration could claim more cores, nodes or accelerators than the run found, each lowering the
# efficiency that review holds a result by. Both are upper bounds on the work a run could do: a CPU is now
# counted at `cpu_clock_ghz` (high on purpose: few server cores sustain it with vector units busy), and
# `system.facts` fails a registration larger than the run (`facts_exact`).
# The audit evaluates a generated preset's (smoke's) accuracies on a private split (`audit_private_split`): a
# model trained on the public validation images, or an accuracy logged for them alone, does not carry over.
# Half precisions replay further from their commitments: on another thread count bf16 segments ended up to
# 0.202 of their move away (smoke; fashion-mnist 0.087), fp16 0.193 (0.081), while a quarter of the steps left
# out ended 0.307 or more away (bench/audit_cost.py --precision): 0.25 for both, 0.2 stays fp32's (and tf32's,
# which a CPU runs as fp32).
# `llm_official_presets`: the AIPerf-LLM presets whose results may be official (spec/llmtrust.py; an LLM run's
# witness and system checks use this table's thresholds); a service's own version may list others.
THRESHOLDS["3.1"] = {**THRESHOLDS["3.0"], "cpu_clock_ghz": 3.5, "facts_exact": True, "audit_private_split": True,
                     "audit_replay_tolerance": {"default": 0.2, "bf16": 0.25, "fp16": 0.25},
                     "llm_official_presets": ["llm-kjv"]}


RELEASED = tuple(THRESHOLDS)
"""The spec's own rules versions, oldest first; every one stays, and a log is verified under the one it declares."""

INTRODUCED = {"integrity.bound": "2.0", "validity.rules": "2.0", "system.": "2.0", "witness.": "2.0",
              "audit.retention": "2.0", "audit.commitments": "3.0"}
"""Checks (by name prefix) that a rules version makes, with the version that brought them; older versions make
only the others."""


def released(th: Mapping[str, Any]) -> str:
    """The released rules version a table is, or is built on (a service's own version names its base)."""
    base = th.get("_base")
    if base is not None:
        return released(THRESHOLDS[base])
    return next((name for name, table in THRESHOLDS.items() if table is th), None) or \
        next((name for name in RELEASED if THRESHOLDS[name] == th), RULES_VERSION)


def _order(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def in_force(name: str, th: Mapping[str, Any]) -> bool:
    """Whether the rules version `th` makes the check `name`."""
    since = next((v for prefix, v in INTRODUCED.items() if name.startswith(prefix)), None)
    return since is None or _order(released(th)) >= _order(since)


def declared_version(run: Mapping[str, Any]) -> str | None:
    """The rules version a run was made for: run.json's `rules_version` (spec 2). Spec 1 logs do not say; their
    runners are told apart by what they wrote: `config.keep_states` from the runners of rules 3.0 (3.1's
    runners wrote the same: the service knows which a stored result was verified under),
    `config.system_id` from those of 2.0, neither before (1.0)."""
    declared = run.get("rules_version")
    if isinstance(declared, str):
        return declared
    if run.get("spec_version") != "1":
        return None
    config = run.get("config") if isinstance(run.get("config"), Mapping) else {}
    assert isinstance(config, Mapping)
    if "keep_states" in config:
        return "3.0"
    return "2.0" if "system_id" in config else "1.0"


def version_of(run: Mapping[str, Any]) -> str:
    """The rules version a run is verified under by default: the one it declares, the current one if it
    declares none this spec knows (`integrity.versions` then fails an unknown one)."""
    declared = declared_version(run)
    return declared if declared in THRESHOLDS else RULES_VERSION


RUNNER_SIDE = ("weights_keep_share", "states_keep_share", "commit_every_steps")
"""Thresholds the runner applies while a run runs (what it keeps, when it commits): a service's own rules
version (`add_versions`) cannot change them, or the service would ask for what the run never kept."""


def add_versions(versions: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Add rules versions of one's own (a private list, a CI service): each is a known version's table
    (`base`) with some thresholds changed. Returns their names; ValueError names what is wrong."""
    added = []
    for name, spec in versions.items():
        base = spec.get("base")
        if base not in THRESHOLDS:
            raise ValueError(f"rules version {name!r}: base {base!r} is not a known version ({', '.join(THRESHOLDS)})")
        if name in THRESHOLDS and THRESHOLDS[name].get("_base") is None:
            raise ValueError(f"rules version {name!r} is one of the spec's own and cannot be redefined")
        unknown = set(spec) - set(THRESHOLDS[base]) - {"base"}
        if unknown:
            raise ValueError(f"rules version {name!r}: unknown thresholds {sorted(unknown)}")
        fixed = sorted(k for k in RUNNER_SIDE if k in spec and spec[k] != THRESHOLDS[base].get(k))
        if fixed:
            raise ValueError(f"rules version {name!r}: {', '.join(fixed)} cannot change: the runner applies them as "
                             "it runs, by the rules version it ships with")
        THRESHOLDS[name] = {**THRESHOLDS[base], **{k: v for k, v in spec.items() if k != "base"}, "_base": base}
        added.append(name)
    return added


def thresholds(version: str = RULES_VERSION) -> dict[str, Any]:
    try:
        return THRESHOLDS[version]
    except KeyError:
        raise ValueError(f"unknown rules version {version!r} (known: {', '.join(THRESHOLDS)})") from None


def check(name: str, threshold: Any, measured: Any, passed: bool, message: str) -> dict[str, Any]:
    return {"name": name, "threshold": threshold, "measured": measured, "passed": bool(passed),
            "message": message}


def group(checks: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [c for c in checks if c["name"].startswith(prefix + ".")]


def all_passed(checks: list[dict[str, Any]], prefix: str) -> bool:
    selected = group(checks, prefix)
    return bool(selected) and all(c["passed"] for c in selected)


def blocking(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The failed checks that reject a result."""
    return [c for c in checks if not c["passed"] and c["name"].startswith(BLOCKING)]


def official(checks: list[dict[str, Any]], th: Mapping[str, Any] | None = None) -> bool:
    """Every check of every group passed (1.0: integrity and validity)."""
    if th is not None and released(th) == "1.0":
        return all_passed(checks, "integrity") and all_passed(checks, "validity")
    return all(all_passed(checks, g) for g in GROUPS)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


# ---- checks ------------------------------------------------------------------------------------------
# integrity

def check_chain(lines: int, error: str | None) -> dict[str, Any]:
    if error is None:
        return check("integrity.chain", "intact", lines, True,
                     f"hash chain intact over {lines} lines")
    return check("integrity.chain", "intact", lines, False,
                 f"events.jsonl {error}")


def check_signature(signed: bool, findings: list[str], require: bool, fingerprint: str | None) -> dict[str, Any]:
    threshold = "signed" if require else "signed, or not signed (local)"
    if not signed:
        msg = "not signed (no MANIFEST.json)"
        return check("integrity.signature", threshold, "not signed", not require,
                     msg + ("; a signature is required" if require else "; allowed for local verification"))
    if findings:
        return check("integrity.signature", threshold, "invalid", False, "; ".join(findings))
    return check("integrity.signature", threshold, fingerprint, True, f"valid Ed25519 signature by {fingerprint}")


def check_manifest_digests(signed: bool, findings: list[str], require: bool) -> dict[str, Any]:
    threshold = 0  # differences from the manifest
    if not signed:
        return check("integrity.manifest", threshold, None, not require,
                     "no MANIFEST.json" + ("; required" if require else "; nothing to compare"))
    if findings:
        return check("integrity.manifest", threshold, len(findings), False, "; ".join(findings[:MAX_MESSAGES])
                     + (f" (and {len(findings) - MAX_MESSAGES} more)" if len(findings) > MAX_MESSAGES else ""))
    return check("integrity.manifest", threshold, 0, True, "every file matches MANIFEST.json")


def check_run_json(problems: list[str], consistency: Findings | None = None) -> dict[str, Any]:
    msgs = list(problems)
    count = len(problems)
    if consistency is not None and consistency.count:
        msgs.append(consistency.text(""))
        count += consistency.count
    return check("integrity.run", 0, count, count == 0,
                 "; ".join(msgs) if msgs else "run.json complete and consistent with the log")


def check_schema(audit: LogAudit) -> dict[str, Any]:
    return check("integrity.schema", 0, audit.schema.count, audit.schema.count == 0,
                 audit.schema.text(f"all {audit.events} events match their schema"))


def check_versions(run: Mapping[str, Any], th: Mapping[str, Any]) -> dict[str, Any]:
    spec = run.get("spec_version")
    runner = run.get("runner_version")
    rules = run.get("rules")
    problems = []
    if spec not in th["spec_versions"]:
        problems.append(f"spec version {spec!r} is not known (known: {', '.join(th['spec_versions'])})")
    if not isinstance(runner, str) or not re.fullmatch(r"\d+(\.\d+)*([.-]?[0-9A-Za-z.+-]*)?", runner):
        problems.append(f"runner version {runner!r} is not a version string")
    if rules not in th["flop_rules"]:
        problems.append(f"FLOP rules {rules!r} are not known (known: {', '.join(th['flop_rules'])})")
    measured = {"spec": spec, "runner": runner, "rules": rules}
    if "rules_version" in run:  # spec 2 declares it
        measured["rules_version"] = declared = run["rules_version"]
        if declared not in THRESHOLDS:
            problems.append(f"rules version {declared!r} is not known (known: {', '.join(RELEASED)})")
    return check("integrity.versions", {"spec": th["spec_versions"], "rules": th["flop_rules"]},
                 measured, not problems,
                 "; ".join(problems) or f"spec {spec}, runner {runner}, rules {rules}")


def check_graphs(errors: Findings, trials: int, distinct: int) -> dict[str, Any]:
    return check("integrity.graphs", 0, errors.count, errors.count == 0,
                 errors.text(f"{trials} trials' graphs ({distinct} distinct files) valid, hashes match the log; "
                             "FLOPs recomputed from them"))


def check_bound(found: Findings) -> dict[str, Any]:
    return check("integrity.bound", 0, found.count, found.count == 0, found.text(
        "run_started and run.json agree on rules, preset, precision, slots, devices per slot and data set; "
        "the data set, every graph's input and classes and every trial's hyper-parameters are the preset's; "
        "every graph within the search's bounds"))


# validity

def check_rules(rules: Any, th: Mapping[str, Any]) -> dict[str, Any]:
    ok = rules == th["official_rules"]
    return check("validity.rules", th["official_rules"], rules, ok,
                 f"FLOP rules {rules!r}" + ("" if ok else f": only {th['official_rules']!r} results are official; "
                                                          "they are listed apart"))


def check_preset(preset: Any, th: Mapping[str, Any]) -> dict[str, Any]:
    ok = preset == th["official_preset"]
    return check("validity.preset", th["official_preset"], preset, ok,
                 f"preset {preset!r}" + ("" if ok else f": only {th['official_preset']!r} is official"))


def check_duration(duration_s: float, th: Mapping[str, Any]) -> dict[str, Any]:
    ok = duration_s >= th["min_duration_s"]
    return check("validity.duration", th["min_duration_s"], duration_s, ok,
                 f"ran {duration_s:.0f} s" + ("" if ok else f", less than the {th['min_duration_s']:.0f} s required"))


def check_precision(precision: Any, th: Mapping[str, Any]) -> dict[str, Any]:
    ok = precision in th["precisions"]
    return check("validity.precision", th["precisions"], precision, ok,
                 f"precision {precision!r}" + ("" if ok else ": a 16-bit or wider float format is required"))


def check_accuracy(max_accuracy: float, th: Mapping[str, Any]) -> dict[str, Any]:
    ok = max_accuracy >= th["min_max_accuracy"]
    return check("validity.accuracy", th["min_max_accuracy"], max_accuracy, ok,
                 f"best validation accuracy {max_accuracy:.4f}"
                 + ("" if ok else f", below {th['min_max_accuracy']:.2f}"))


def check_full_validation(audit: LogAudit, preset: Any, epochs: int, th: Mapping[str, Any]) -> dict[str, Any]:
    val = audit.val_images
    threshold: Any = val
    problems = []
    fixed = presetfacts.get(preset)
    if "imagenet_val_images" in th:  # 1.0 held only the official preset to its validation set
        fixed = presetfacts.get(th["official_preset"]) if preset == th["official_preset"] else None
    if fixed is not None and fixed.val_images is not None:
        threshold = fixed.val_images
        if val != fixed.val_images:
            problems.append(f"run.json declares {val} validation images; {fixed.title} has {fixed.val_images}")
    if val is None:
        problems.append("run.json declares no dataset.val_images")
    if audit.validation.count:
        problems.append(audit.validation.text(""))
    if epochs == 0:
        problems.append("no epoch was logged")
    ok = not problems
    return check("validity.full_validation", threshold, audit.validation.count, ok,
                 "; ".join(problems) if problems else f"all {epochs} epochs evaluated the full {val}-image validation set")


def check_complete(finished: bool) -> dict[str, Any]:
    return check("validity.complete", True, finished, finished,
                 "the run finished" if finished else "no run_finished event: the run is incomplete or still running")


# stability

def check_stability(points: list[dict[str, float]], th: Mapping[str, Any]) -> dict[str, Any]:
    from .scoring import coefficient_of_variation, series_window

    window = series_window(points, th["stability_window"])
    name, bound = "stability.score_cv", th["max_score_cv"]
    what = f"last {th['stability_window']:.0%} of the run"
    if len(window) < th["min_stability_points"]:
        return check(name, bound, None, False,
                     f"only {len(window)} series points in the {what}; {th['min_stability_points']} needed")
    cv = coefficient_of_variation(p["score"] for p in window)
    if cv is None:
        return check(name, bound, None, False, f"no work done in the {what}: the score is 0")
    ok = cv <= bound
    return check(name, bound, cv, ok, f"coefficient of variation {cv:.4f} of the score over the {what} "
                 f"({len(window)} points)" + ("" if ok else f", above {bound}"))


# plausibility

def check_declared_peak(declared: float | None, peak: float | None, how: str, precision: Any,
                        th: Mapping[str, Any]) -> dict[str, Any]:
    """run.json's declared peak is a note; it may not exceed the peak the run is judged by by more than 25 %."""
    name, bound = "plausibility.declared_peak", th["max_declared_to_table"]
    if declared is None:
        return check(name, bound, None, True, f"no declared peak at {precision} (a note only)")
    if peak is None:
        return check(name, bound, None, True, f"declared {_fmt(declared)} FLOP/s at {precision} (a note only; "
                                              f"no known peak to compare: {how})")
    ratio = declared / peak
    ok = ratio <= bound
    return check(name, bound, ratio, ok, f"declared {_fmt(declared)} FLOP/s at {precision} (a note), judged by "
                 f"{_fmt(peak)} ({how})" + ("" if ok else f": more than {bound}x the known peak"))


def check_score_peak(max_score: float, peak: float | None, th: Mapping[str, Any]) -> dict[str, Any]:
    name, bound = "plausibility.score_peak", th["max_score_to_peak"]
    if not peak:
        return check(name, bound, None, True, "not checked: no peak FLOP/s known (see system.peak)")
    ratio = max_score / peak
    ok = ratio <= bound
    return check(name, bound, ratio, ok, f"highest score {_fmt(max_score)} OPS is {ratio:.1%} of the peak "
                 f"{_fmt(peak)} FLOP/s" + ("" if ok else ": above the peak"))


def check_epoch_rate(audit: LogAudit, peak_known: bool, th: Mapping[str, Any]) -> dict[str, Any]:
    name, bound = "plausibility.epoch_rate", th["max_epoch_to_peak"]
    if not peak_known:
        return check(name, bound, None, True, "not checked: no peak FLOP/s known (see system.peak)")
    if audit.max_epoch_ratio is None:
        return check(name, bound, None, True, "no epoch to check")
    ok = audit.epoch_rate.count == 0
    return check(name, bound, audit.max_epoch_ratio, ok, audit.epoch_rate.text(
        f"fastest epoch ran at {_fmt(audit.max_epoch_rate)} FLOP/s, {audit.max_epoch_ratio:.1%} of its slot's peak"))


def check_epoch_images(audit: LogAudit) -> dict[str, Any]:
    cap = audit.images_cap
    if cap is None:
        return check("plausibility.epoch_images", None, None, True, "run.json declares no dataset.train_images")
    return check("plausibility.epoch_images", cap, audit.images.count, audit.images.count == 0,
                 audit.images.text(f"no epoch trained more than the {audit.train_images}-image training set"))


def check_slots(audit: LogAudit) -> dict[str, Any]:
    return check("plausibility.slot_exclusive", 0, audit.slot_clash.count, audit.slot_clash.count == 0,
                 audit.slot_clash.text("no slot ran two trials at once"))


def check_concurrency(audit: LogAudit) -> dict[str, Any]:
    ok = audit.concurrency.count == 0
    return check("plausibility.concurrency", audit.slots, audit.max_concurrency, ok,
                 audit.concurrency.text(f"at most {audit.max_concurrency} trials ran at once on {audit.slots} slots"))


def check_timestamps(audit: LogAudit) -> dict[str, Any]:
    return check("plausibility.timestamps", 0, audit.timestamps.count,
                 audit.timestamps.count == 0, audit.timestamps.text(
                     f"timestamps monotonic; trial clocks within {audit.skew:g} s of the controller's"))


def check_lifecycle(audit: LogAudit) -> dict[str, Any]:
    extra = f"; {audit.repeated_epochs} repeated epochs not counted again" if audit.repeated_epochs else ""
    return check("plausibility.lifecycle", 0, audit.lifecycle.count,
                 audit.lifecycle.count == 0,
                 audit.lifecycle.text("every trial proposed, started, numbered its epochs and ended in order") + extra)


# system: the registered hardware

def check_registered(hw: Any, run_system_id: Any) -> dict[str, Any]:
    name, threshold = "system.registered", "a registered, approved system of the submitting site"
    if not hw.registered:
        return check(name, threshold, None, False, "hardware unregistered: run.json's system facts are the site's "
                     "own statement (the service judges a run by its registered system; offline, verify --system FILE)")
    if hw.status == "rejected":
        return check(name, threshold, hw.system_id, False, f"system {hw.system_id} was rejected by a list "
                     "maintainer (its record says why)")
    if hw.status != "approved":
        return check(name, threshold, hw.system_id, False, f"system {hw.system_id} is {hw.status}: it waits for "
                     f"a list maintainer's approval (or, for a model the peak table lacks, for "
                     f"{hw.accelerator_model!r}'s peak)")
    if run_system_id is not None and str(run_system_id) != str(hw.system_id):
        return check(name, threshold, hw.system_id, False, f"run.json names system {run_system_id}, "
                     f"the registration is system {hw.system_id}")
    return check(name, threshold, hw.system_id, True, hw.describe())


def check_peak_known(peak: float | None, how: str, precision: Any) -> dict[str, Any]:
    return check("system.peak", "known", peak, bool(peak),
                 f"{_fmt(peak)} FLOP/s at {precision} ({how})" if peak else
                 f"no peak FLOP/s known at {precision}: {how}; the result waits outside the official division "
                 "until a list maintainer adds it")


def check_devices(audit: LogAudit, hw: Any, devices_per_slot: Any) -> dict[str, Any]:
    name = "system.devices"
    replay = audit.replay
    per_slot = devices_per_slot if type(devices_per_slot) is int and devices_per_slot >= 1 else None
    threshold = {"per_trial": per_slot, "at_once": None if hw.is_cpu else hw.accelerators}
    problems = []
    if per_slot is not None and replay.max_attempt_devices > per_slot:
        problems.append(f"a trial used {replay.max_attempt_devices} devices; a slot has {per_slot}")
    if not hw.is_cpu and replay.max_devices_running > hw.accelerators:
        problems.append(f"{replay.max_devices_running} devices in use at once; the system has {hw.accelerators} "
                        f"({hw.describe()})")
    measured = {"per_trial": replay.max_attempt_devices, "at_once": replay.max_devices_running}
    where = "CPU processes; the machine's peak bounds every slot" if hw.is_cpu else f"of {hw.accelerators}"
    return check(name, threshold, measured, not problems, "; ".join(problems) or
                 f"at most {replay.max_attempt_devices} devices per trial, {replay.max_devices_running} at once "
                 f"({where})")


def check_facts(hw: Any, run_system: Mapping[str, Any], seen_not_registered: list[str],
                seen: Mapping[str, int], exact: bool = False) -> dict[str, Any]:
    """What the run found it ran on against the registration: the device models its trials reported, and
    run.json's accelerator count (never more than registered). `exact` (3.1 on): run.json's nodes,
    accelerators, CPU model and a CPU system's cores are the registration's, so that a registration cannot
    claim a larger machine, and peak, than the run had."""
    name, threshold = "system.facts", "the run's own facts within the registration"
    if not hw.registered:
        return check(name, threshold, None, True, "no registration: the run is judged by run.json's own facts")
    if exact:
        threshold = "the run's own facts are the registration's"
    problems = []
    if seen_not_registered:
        ranks = ", ".join(f"{seen[m]} x {m}" for m in seen_not_registered)
        problems.append(f"the trials ran on {ranks}; the registration is {hw.describe()}")
    count = run_system.get("accelerator_count")
    registered_count = 0 if hw.is_cpu else hw.accelerators
    if type(count) is int and (count > registered_count or exact and count < registered_count):
        problems.append(f"run.json found {count} accelerators; the registration has "
                        + ("none (a CPU system)" if hw.is_cpu else str(hw.accelerators)))
    if exact:
        problems += _facts_differ(hw, run_system)
    return check(name, threshold, len(problems), not problems, "; ".join(problems) or
                 "the devices the trials reported and run.json's facts agree with the registration")


def _facts_differ(hw: Any, run_system: Mapping[str, Any]) -> list[str]:
    """Where run.json's nodes, CPU model and (a CPU system's) cores are not the registration's."""
    problems = []
    nodes, cores, model = run_system.get("nodes"), run_system.get("cpu_cores"), run_system.get("cpu_model")
    if type(nodes) is int and nodes != hw.nodes:
        problems.append(f"the run found {nodes} node(s); the registration has {hw.nodes}")
    registered_cores = hw.cpu_cores_per_node * hw.nodes
    if hw.is_cpu and type(cores) is int and registered_cores and cores != registered_cores:
        problems.append(f"the run found {cores} CPU cores; the registration has {registered_cores} "
                        f"({hw.nodes} x {hw.cpu_cores_per_node})")
    if isinstance(model, str) and hw.cpu_model and _words(model) != _words(hw.cpu_model):
        problems.append(f"the run found CPU {model!r}; the registration names {hw.cpu_model!r}")
    return problems


def _words(text: str) -> str:
    return " ".join(text.lower().split())


# witness: the service's run token and receipts (spec/witness.py)

def check_witness_token(problems: list[str], checked: bool) -> dict[str, Any]:
    name, threshold = "witness.token", "a valid run token of the service, for this site, system and run"
    if not checked:
        return check(name, threshold, None, False, "cannot be checked: no witness key given "
                     "(verify --witness-key FILE; the service always checks)")
    return check(name, threshold, len(problems), not problems, "; ".join(problems) or
                 "a valid run token of the service; its fields are the run's")


def check_witness_receipts(audit: Any, missing: list[str], checked: bool) -> dict[str, Any]:
    name, threshold = "witness.receipts", "every receipt valid, of this run and this log"
    if not checked:
        return check(name, threshold, None, True, "not checked: no witness key given")
    count = audit.receipt_problems.count + len(missing)
    text = audit.receipt_problems.text("")
    messages = [m for m in (text, "; ".join(missing[:MAX_MESSAGES])) if m]
    if not audit.receipts and not count:
        messages.append("no receipt in the log")
        count = 1 if audit.token is not None else 0
    return check(name, threshold, count, count == 0, "; ".join(messages) or
                 f"{len(audit.receipts)} receipts, each signed by the witness key for a heartbeat line of this log")


def check_witness_coverage(gaps: list[tuple[float, str]], interval: float, th: Mapping[str, Any],
                           checked: bool) -> dict[str, Any]:
    name = "witness.coverage"
    bound = th["witness_max_gap_intervals"] * interval
    if not checked:
        return check(name, bound, None, False, "cannot be checked: no witness key given")
    if not gaps:
        return check(name, bound, None, False, "no receipt: nothing of the run was witnessed")
    longest, where = max(gaps)
    ok = longest <= bound
    return check(name, bound, longest, ok, f"longest stretch without a receipt {longest:.1f} s ({where}), "
                 f"bound {th['witness_max_gap_intervals']} heartbeat intervals of {interval:g} s"
                 + ("" if ok else ": the service did not see this part of the run"))


def check_witness_timeline(problems: list[str], checked: bool, th: Mapping[str, Any]) -> dict[str, Any]:
    name, threshold = "witness.timeline", th["witness_tolerance_s"]
    if not checked:
        return check(name, threshold, None, True, "not checked: no witness key given")
    return check(name, threshold, len(problems), not problems, "; ".join(problems) or
                 "every epoch was in the log before the first receipt after its end; the log's clock agrees "
                 "with the service's")


# audit: what the log did with the trials' weights (the service's audit of the weights themselves is
# docs/service.md's audit.weights, audit.architecture, audit.accuracy)

def check_retention(found: Findings, kept: int, finished: int) -> dict[str, Any]:
    return check("audit.retention", 0, found.count, found.count == 0, found.text(
        f"the weights of {kept} of {finished} finished trials kept, as the beacons and the best trial say"))


def check_commitments(found: Findings, every: int | None, segments: int) -> dict[str, Any]:
    if every is None:
        return check("audit.commitments", None, segments, True,
                     "this rules version asks for no commitments of the training state")
    return check("audit.commitments", every, found.count, found.count == 0, found.text(
        f"every counted epoch's training state committed, at most {every} steps apart ({segments} segments)"))


def replay_tolerance(th: Mapping[str, Any], precision: str) -> float:
    table = th.get("audit_replay_tolerance") or {"default": 0.0}
    return float(table.get(precision, table["default"]))


def audit_tolerance(accuracy: float, images: int, th: Mapping[str, Any], other_images: int | None = None) -> float:
    """How far a re-evaluated accuracy may be from the logged one: a fixed part plus binomial noise, of the
    re-evaluation's `images`, and where it measured other images than the log's (a private split), of the
    difference of two independent samples (`other_images` the log's)."""
    p = min(max(float(accuracy), 0.0), 1.0)
    per_image = 1.0 / max(int(images), 1) + (1.0 / max(int(other_images), 1) if other_images else 0.0)
    sigma = (p * (1.0 - p) * per_image) ** 0.5
    return float(th["audit_accuracy_fixed"] + th["audit_accuracy_sigmas"] * sigma)
