"""The rules a result must pass (DESIGN section 5; operator-facing text in docs/rules.md).

Every check returns one dict `{name, threshold, measured, passed, message}`; the list of them is
the verification report. Names are `<group>.<check>` with group one of integrity, validity,
stability, plausibility. Thresholds live in ONE versioned table, `THRESHOLDS[RULES_VERSION]`;
changing a number means a new rules version (results carry the version they were checked under).

`LogAudit` streams the main event log once (constant memory apart from small per-trial and
per-slot maps) and gathers what the schema and plausibility checks measure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from . import SPEC_VERSION
from .peaks import PRECISIONS

RULES_VERSION = "1.0"

THRESHOLDS: dict[str, dict[str, Any]] = {
    "1.0": {
        # integrity
        "spec_versions": [SPEC_VERSION],
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


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


# ---- schema -------------------------------------------------------------------------------------

TRIAL_ID = re.compile(r"^t\d{4,}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
RUN_ID = re.compile(r"^[0-9a-f]{32}$")

ENUMS: dict[str, frozenset[str]] = {
    "morphism": frozenset({"deeper", "wider", "skip"}),
    "hparam_source": frozenset({"seed", "inherited", "tpe"}),
    "trial_finished.reason": frozenset({"budget", "early_stop"}),
    "trial_cancelled.reason": frozenset({"duration", "stop"}),
    "run_finished.reason": frozenset({"duration", "stopped", "exhausted"}),
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _v_str(v: Any) -> bool:
    return isinstance(v, str)


def _v_trial(v: Any) -> bool:
    return isinstance(v, str) and TRIAL_ID.fullmatch(v) is not None


def _v_pos(v: Any) -> bool:
    return _is_int(v) and v >= 1


def _v_nonneg(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _v_acc(v: Any) -> bool:
    return _is_num(v) and 0.0 <= v <= 1.0


def _v_loss(v: Any) -> bool:
    return v is None or _is_num(v)


def _v_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _v_enum(key: str) -> Callable[[Any], bool]:
    allowed = ENUMS[key]
    return lambda v: isinstance(v, str) and v in allowed


def _v_parent(v: Any) -> bool:
    return v is None or _v_trial(v)


def _v_morphisms(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(m, str) and m in ENUMS["morphism"] for m in v)


def _v_nodes(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(n, str) for n in v)


EVENT_FIELDS: dict[str, tuple[tuple[str, Callable[[Any], bool], str], ...]] = {}


def _fields(**spec: tuple[Callable[[Any], bool], str]) -> tuple[tuple[str, Callable[[Any], bool], str], ...]:
    return tuple((k, f, what) for k, (f, what) in spec.items())


_TRIAL = (_v_trial, "a trial id (t0000, t0001, ...)")
_ATTEMPT = (_v_pos, "an integer >= 1")
_STR = (_v_str, "a string")
_NUM = (_is_num, "a finite number")
_NONNEG = (_v_nonneg, "an integer >= 0")

EVENT_FIELDS.update({
    "run_started": _fields(run_id=(lambda v: isinstance(v, str) and RUN_ID.fullmatch(v) is not None, "32 hex chars"),
                           preset=_STR, rules=_STR, slots=(_v_pos, "an integer >= 1"),
                           runner_version=_STR, spec_version=_STR),
    "run_resumed": _fields(run_id=_STR),
    "trial_proposed": _fields(trial=_TRIAL, arch_hash=(lambda v: isinstance(v, str) and HEX64.fullmatch(v) is not None,
                                                       "64 lowercase hex chars"),
                              parent=(_v_parent, "a trial id or null"),
                              morphisms=(_v_morphisms, "a list of deeper/wider/skip"),
                              hparams=(lambda v: isinstance(v, dict), "an object"),
                              hparam_source=(_v_enum("hparam_source"), "seed, inherited or tpe"),
                              round=_NONNEG, epoch_budget=(_v_pos, "an integer >= 1")),
    "trial_started": _fields(trial=_TRIAL, attempt=_ATTEMPT, slot=_NONNEG,
                             nodes=(_v_nodes, "a list of strings"), devices=_NONNEG),
    "epoch_end": _fields(trial=_TRIAL, attempt=_ATTEMPT, epoch=(_v_pos, "an integer >= 1"),
                         images_trained=_NONNEG, images_evaluated=_NONNEG,
                         val_accuracy=(_v_acc, "a number in [0, 1]"), val_loss=(_v_loss, "a number or null"),
                         started_at=_NUM, ended_at=_NUM, seconds=_NUM),
    "trial_finished": _fields(trial=_TRIAL, attempt=_ATTEMPT, epochs=_NONNEG,
                              best_accuracy=(_v_acc, "a number in [0, 1]"),
                              reason=(_v_enum("trial_finished.reason"), "budget or early_stop")),
    "trial_failed": _fields(trial=_TRIAL, attempt=_ATTEMPT, error=_STR, retry=(_v_bool, "true or false")),
    "trial_cancelled": _fields(trial=_TRIAL, attempt=_ATTEMPT,
                               reason=(_v_enum("trial_cancelled.reason"), "duration or stop")),
    "slot_lost": _fields(slot=_NONNEG, reason=_STR),
    "run_finished": _fields(reason=(_v_enum("run_finished.reason"), "duration, stopped or exhausted")),
})

RUN_JSON_FIELDS = _fields(
    run_id=(lambda v: isinstance(v, str) and RUN_ID.fullmatch(v) is not None, "32 hex chars"),
    runner_version=_STR, spec_version=_STR, rules=_STR, preset=_STR, precision=_STR,
    config=(lambda v: isinstance(v, dict), "an object"),
    system=(lambda v: isinstance(v, dict), "an object"),
    declared_peak_flops=(lambda v: isinstance(v, dict), "an object"),
    dataset=(lambda v: isinstance(v, dict), "an object"),
)


def event_problem(data: Mapping[str, Any]) -> str | None:
    """Why an event does not match its type's schema, or None (extra fields are allowed)."""
    spec = EVENT_FIELDS.get(data["type"])
    if spec is None:
        return f"unknown event type {data['type']!r}"
    for key, ok, what in spec:
        if key not in data:
            return f"{data['type']}: missing field {key!r}"
        if not ok(data[key]):
            return f"{data['type']}: field {key!r} is {data[key]!r}, expected {what}"
    return None


def _num_ok(v: Any) -> bool:
    """A finite JSON number (NaN and infinities fail the comparison)."""
    t = type(v)
    return (t is float or t is int) and -1e308 <= v <= 1e308


def epoch_end_ok(d: Mapping[str, Any], known_trials: set[str] | frozenset[str] = frozenset()) -> bool:
    """Fast path of `event_problem` for `epoch_end` (the bulk of a log): True if it certainly passes.

    False means "look closer" (`event_problem` then says what is wrong, if anything).
    """
    try:
        trial, attempt, epoch = d["trial"], d["attempt"], d["epoch"]
        tr, ev, acc, loss = d["images_trained"], d["images_evaluated"], d["val_accuracy"], d["val_loss"]
        return (type(attempt) is int and attempt >= 1 and type(epoch) is int and epoch >= 1
                and type(tr) is int and tr >= 0 and type(ev) is int and ev >= 0
                and (type(acc) is float or type(acc) is int) and 0.0 <= acc <= 1.0
                and (loss is None or _num_ok(loss))
                and _num_ok(d["started_at"]) and _num_ok(d["ended_at"]) and _num_ok(d["seconds"])
                and (trial in known_trials or _v_trial(trial)))
    except KeyError:
        return False


def run_json_problems(run: Mapping[str, Any]) -> list[str]:
    problems = []
    for key, ok, what in RUN_JSON_FIELDS:
        if key not in run:
            problems.append(f"run.json: missing field {key!r}")
        elif not ok(run[key]):
            problems.append(f"run.json: field {key!r} is {run[key]!r}, expected {what}")
    cfg = run.get("config")
    if isinstance(cfg, dict) and not _v_pos(cfg.get("slots")):
        problems.append(f"run.json: config.slots is {cfg.get('slots')!r}, expected an integer >= 1")
    ds = run.get("dataset")
    if isinstance(ds, dict):
        for key in ("train_images", "val_images"):
            if not _v_nonneg(ds.get(key)):
                problems.append(f"run.json: dataset.{key} is {ds.get(key)!r}, expected an integer >= 0")
    return problems


# ---- streaming audit -----------------------------------------------------------------------------

MAX_MESSAGES = 5


class _Findings:
    """A count of problems and the first few messages (memory stays bounded)."""

    __slots__ = ("count", "messages")

    def __init__(self) -> None:
        self.count = 0
        self.messages: list[str] = []

    def add(self, line: int, message: str) -> None:
        self.count += 1
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(f"line {line}: {message}")

    def text(self, ok: str) -> str:
        if not self.count:
            return ok
        more = f" (and {self.count - len(self.messages)} more)" if self.count > len(self.messages) else ""
        return "; ".join(self.messages) + more


class LogAudit:
    """Streams the main log's events and gathers what the schema and plausibility checks measure.

    `flops_for(trial)` gives (train, eval) FLOP/image of a trial or None; `slot_peak(devices)` the
    peak FLOP/s of a slot with that many devices, or None if no peak is known.
    """

    def __init__(self, run: Mapping[str, Any], th: Mapping[str, Any],
                 flops_for: Callable[[str], tuple[float, float] | None] | None = None,
                 slot_peak: Callable[[int], float | None] | None = None) -> None:
        self.th = th
        self.flops_for = flops_for
        self.slot_peak = slot_peak
        self.run_id = run.get("run_id")
        cfg = run.get("config") if isinstance(run.get("config"), dict) else {}
        self.slots: int | None = cfg.get("slots") if _v_pos(cfg.get("slots")) else None
        ds = run.get("dataset") if isinstance(run.get("dataset"), dict) else {}
        self.val_images = ds.get("val_images") if _v_nonneg(ds.get("val_images")) else None
        self.train_images = ds.get("train_images") if _v_nonneg(ds.get("train_images")) else None
        self.skew = float(th["clock_skew_s"])
        self.images_cap = (None if self.train_images is None else
                           self.train_images * (1.0 + th["epoch_images_slack"]) + th["epoch_images_pad"])

        self.events = 0
        self.schema = _Findings()
        self.consistency = _Findings()    # run_started vs run.json, order of run events
        self.lifecycle = _Findings()      # proposed -> started -> epochs -> ended, epoch numbering
        self.slot_clash = _Findings()     # a slot running two trials at once
        self.concurrency = _Findings()    # more trials running than slots / slot out of range
        self.timestamps = _Findings()
        self.validation = _Findings()     # images_evaluated != val_images
        self.images = _Findings()         # images_trained over the dataset
        self.epoch_rate = _Findings()
        self.max_concurrency = 0
        self.max_epoch_ratio: float | None = None
        self.max_epoch_rate: float | None = None
        self.repeated_epochs = 0
        self.run_started = 0
        self.run_finished = 0
        self.trials_proposed = 0

        self.proposals: dict[str, str] = {}        # trial -> declared arch hash
        self._last_t: float | None = None
        self._active: dict[tuple[str, int], tuple[int, int, float]] = {}  # (trial, attempt) -> slot, devices, t
        self._slot_busy: dict[int, tuple[str, int]] = {}
        self._running: dict[str, int] = {}  # trial -> its running attempt
        self._orphaned: set[tuple[str, int]] = set()
        self._last_epoch: dict[str, int] = {}
        self._last_ended: dict[str, float] = {}

    # one event -------------------------------------------------------------------------------------
    def feed(self, data: Mapping[str, Any], line: int) -> None:
        self.events += 1
        t = data["t"]
        if self._last_t is not None and t < self._last_t:
            self.timestamps.add(line, f"event time {t} is before the previous event's {self._last_t}")
        self._last_t = t if self._last_t is None else max(t, self._last_t)
        kind = data["type"]
        if kind != "epoch_end" or not epoch_end_ok(data, self.proposals):
            problem = event_problem(data)
            if problem is not None:
                self.schema.add(line, problem)
                return
        if self.run_finished and kind in ("trial_proposed", "trial_started", "run_started", "run_resumed"):
            self.consistency.add(line, f"{kind} after run_finished")
        if kind == "epoch_end":
            self._epoch(data, line, t)
        elif kind == "trial_started":
            self._started(data, line, t)
        elif kind in ("trial_finished", "trial_failed", "trial_cancelled"):
            self._ended(data, line)
        elif kind == "trial_proposed":
            self.trials_proposed += 1
            trial = data["trial"]
            if trial in self.proposals:
                self.lifecycle.add(line, f"trial {trial} proposed twice")
            self.proposals[trial] = data["arch_hash"]
        elif kind == "run_started":
            self.run_started += 1
            if self.run_started > 1 or line != 1:
                self.consistency.add(line, "run_started must be the first event, once")
            if data["run_id"] != self.run_id:
                self.consistency.add(line, f"run id {data['run_id']} differs from run.json's {self.run_id}")
            if self.slots is not None and data["slots"] != self.slots:
                self.consistency.add(line, f"{data['slots']} slots, run.json config says {self.slots}")
            if self.slots is None:
                self.slots = data["slots"]
        elif kind == "run_resumed":
            if data["run_id"] != self.run_id:
                self.consistency.add(line, f"run id {data['run_id']} differs from run.json's {self.run_id}")
            # The controller was restarted: attempts it had running end here (their late epochs may
            # still be copied in); their slots are free again.
            self._orphaned.update(self._active)
            self._active.clear()
            self._slot_busy.clear()
            self._running.clear()
        elif kind == "slot_lost":
            owner = self._slot_busy.pop(data["slot"], None)
            if owner is not None:
                self._drop(owner)
        elif kind == "run_finished":
            self.run_finished += 1
            if self.run_finished > 1:
                self.consistency.add(line, "run_finished appears more than once")

    def epoch_checked(self, data: Mapping[str, Any], line: int) -> None:
        """`feed` for an `epoch_end` already found well-formed (`epoch_end_ok`): the hot path."""
        self.events += 1
        t = data["t"]
        last_t = self._last_t
        if last_t is not None and t < last_t:
            self.timestamps.add(line, f"event time {t} is before the previous event's {last_t}")
        elif last_t is None or t > last_t:
            self._last_t = t
        self._epoch(data, line, t)

    def finish(self) -> None:
        """Call after the last event: checks of the log as a whole."""
        if self.events and not self.run_started:
            self.consistency.add(1, "no run_started event")

    def _started(self, d: Mapping[str, Any], line: int, t: float) -> None:
        trial, attempt, slot = d["trial"], d["attempt"], d["slot"]
        if trial not in self.proposals:
            self.lifecycle.add(line, f"trial {trial} started but never proposed")
        key = (trial, attempt)
        if key in self._active or key in self._orphaned:
            self.lifecycle.add(line, f"trial {trial} attempt {attempt} started twice")
        if trial in self._running:
            self.slot_clash.add(line, f"trial {trial} started on slot {slot} while attempt "
                                      f"{self._running[trial]} of it still runs")
        if self.slots is not None and slot >= self.slots:
            self.concurrency.add(line, f"slot {slot} does not exist (the run has {self.slots} slots)")
        owner = self._slot_busy.get(slot)
        if owner is not None:
            self.slot_clash.add(line, f"slot {slot} starts trial {trial} while trial {owner[0]} "
                                      f"(attempt {owner[1]}) still runs on it")
            self._drop(owner)
        self._slot_busy[slot] = key
        self._active[key] = (slot, d["devices"], t)
        self._running[trial] = attempt
        n = len(self._active)
        if n > self.max_concurrency:
            self.max_concurrency = n
            if self.slots is not None and n > self.slots:
                self.concurrency.add(line, f"{n} trials running at once with {self.slots} slots")

    def _drop(self, key: tuple[str, int]) -> None:
        """An attempt that stopped being tracked without an end event (its late lines are allowed)."""
        if self._active.pop(key, None) is not None:
            self._orphaned.add(key)
        if self._running.get(key[0]) == key[1]:
            del self._running[key[0]]

    def _ended(self, d: Mapping[str, Any], line: int) -> None:
        key = (d["trial"], d["attempt"])
        info = self._active.pop(key, None)
        if self._running.get(key[0]) == key[1]:
            del self._running[key[0]]
        if info is None:
            if key in self._orphaned:
                self._orphaned.discard(key)
            else:
                self.lifecycle.add(line, f"{d['type']} for trial {key[0]} attempt {key[1]}, which is not running")
            return
        if self._slot_busy.get(info[0]) == key:
            del self._slot_busy[info[0]]

    def _epoch(self, d: Mapping[str, Any], line: int, t: float) -> None:
        trial = d["trial"]
        key = (trial, d["attempt"])
        info = self._active.get(key)
        if info is None and key not in self._orphaned:
            self.lifecycle.add(line, f"epoch of trial {trial} attempt {key[1]}, which was never started")
        epoch = d["epoch"]
        last = self._last_epoch.get(trial, 0)
        if epoch <= last:
            self.repeated_epochs += 1
        else:
            if epoch != last + 1:
                self.lifecycle.add(line, f"trial {trial} epoch {epoch} follows epoch {last} (a gap)")
            self._last_epoch[trial] = epoch
        started, ended = d["started_at"], d["ended_at"]
        skew = self.skew
        if ended < started:
            self.timestamps.add(line, f"trial {trial} epoch {epoch} ends ({ended}) before it starts ({started})")
        if ended > t + skew:
            self.timestamps.add(line, f"trial {trial} epoch {epoch} ended_at {ended} is after the line "
                                      f"recording it was written ({t}; tolerance {skew:g} s)")
        if info is not None and started < info[2] - skew:
            self.timestamps.add(line, f"trial {trial} epoch {epoch} started_at {started} is before the "
                                      f"trial started ({info[2]}; tolerance {skew:g} s)")
        prev_end = self._last_ended.get(trial)
        if prev_end is not None and ended < prev_end:
            self.timestamps.add(line, f"trial {trial} epoch {epoch} ends before its previous epoch")
        self._last_ended[trial] = ended if prev_end is None else max(ended, prev_end)
        trained, evaluated = d["images_trained"], d["images_evaluated"]
        if self.val_images is not None and evaluated != self.val_images:
            self.validation.add(line, f"trial {trial} epoch {epoch} evaluated {evaluated} images, "
                                      f"the validation set has {self.val_images}")
        if self.images_cap is not None and trained > self.images_cap:
            self.images.add(line, f"trial {trial} epoch {epoch} trained {trained} images, the training "
                                  f"set has {self.train_images}")
        # FLOP rate of the epoch against its slot's peak.
        if self.flops_for is None or self.slot_peak is None:
            return
        f = self.flops_for(trial)
        if f is None:
            return
        devices = info[1] if info is not None else 1
        peak = self.slot_peak(devices)
        if not peak:
            return
        work = f[0] * trained + f[1] * evaluated
        seconds = ended - started
        rate = work / seconds if seconds > 0 else (math.inf if work > 0 else 0.0)
        ratio = rate / peak
        if self.max_epoch_ratio is None or ratio > self.max_epoch_ratio:
            self.max_epoch_ratio = ratio
            self.max_epoch_rate = rate
        if ratio > self.th["max_epoch_to_peak"]:
            self.epoch_rate.add(line, f"trial {trial} epoch {epoch}: {_fmt(rate)} FLOP/s on a slot whose "
                                      f"peak is {_fmt(peak)} FLOP/s")


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


def check_run_json(problems: list[str], consistency: _Findings | None = None) -> dict[str, Any]:
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
    return check("integrity.versions", {"spec": th["spec_versions"], "rules": th["flop_rules"]},
                 {"spec": spec, "runner": runner, "rules": rules}, not problems,
                 "; ".join(problems) or f"spec {spec}, runner {runner}, rules {rules}")


def check_graphs(errors: _Findings, trials: int, distinct: int) -> dict[str, Any]:
    return check("integrity.graphs", 0, errors.count, errors.count == 0,
                 errors.text(f"{trials} trials' graphs ({distinct} distinct files) valid, hashes match the log; "
                             "FLOPs recomputed from them"))


# validity

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
    if preset == th["official_preset"]:
        threshold = th["imagenet_val_images"]
        if val != th["imagenet_val_images"]:
            problems.append(f"run.json declares {val} validation images; ImageNet-1k has {th['imagenet_val_images']}")
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

def check_declared_peak(declared: float | None, table: float | None, how: str, precision: Any,
                        th: Mapping[str, Any]) -> dict[str, Any]:
    name, bound = "plausibility.declared_peak", th["max_declared_to_table"]
    if declared is None or declared <= 0:
        if table is None:
            return check(name, bound, None, False, f"no declared peak at {precision} and none known: {how}")
        return check(name, bound, None, True, f"no declared peak at {precision}; using {_fmt(table)} FLOP/s ({how})")
    if table is None:
        return check(name, bound, None, True, f"declared {_fmt(declared)} FLOP/s at {precision}; {how}")
    ratio = declared / table
    ok = ratio <= bound
    return check(name, bound, ratio, ok, f"declared {_fmt(declared)} FLOP/s at {precision}, table "
                 f"{_fmt(table)} ({how})" + ("" if ok else f": more than {bound}x the known peak"))


def check_score_peak(max_score: float, peak: float | None, th: Mapping[str, Any]) -> dict[str, Any]:
    name, bound = "plausibility.score_peak", th["max_score_to_peak"]
    if not peak:
        return check(name, bound, None, False, "no peak FLOP/s known to compare the score with")
    ratio = max_score / peak
    ok = ratio <= bound
    return check(name, bound, ratio, ok, f"highest score {_fmt(max_score)} OPS is {ratio:.1%} of the peak "
                 f"{_fmt(peak)} FLOP/s" + ("" if ok else ": above the peak"))


def check_epoch_rate(audit: LogAudit, peak_known: bool, th: Mapping[str, Any]) -> dict[str, Any]:
    name, bound = "plausibility.epoch_rate", th["max_epoch_to_peak"]
    if not peak_known:
        return check(name, bound, None, False, "no peak FLOP/s known to compare epochs with")
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
