"""The trust checks of an AIPerf-LLM run, as for images: the registered system it is judged by (spec/hardware.py:
`system.registered`, `system.peak`, `system.facts`) and the service's witness (spec/witness.py's WitnessAudit fed
with the LLM log: `witness.token`, `witness.receipts`, `witness.coverage`, `witness.timeline`), under the current
image rules' witness thresholds. A `train_end` line is the LLM log's counterpart of an image epoch: the witness
holds each to the receipts around it, so that times compressed or filled in later do not pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import hardware
from . import rules as R
from .witness import ServiceRecords, WitnessAudit, token_interval, token_issued_at

OFFICIAL_PRESETS = ("llm-kjv",)
"""Presets whose results may be official under rules that name none (before 3.1); from 3.1 the rules table's
`llm_official_presets` (a service's own rules version may list others: a CI service ranks a short llm-smoke run
officially, as its image rules do a smoke run)."""


@dataclass
class Judged:
    """What the trust checks decided: the checks, the hardware the run is judged by and its peak."""

    checks: list[dict[str, Any]]
    hardware: hardware.Hardware
    peak: float | None
    peak_source: str


class _LogView:
    """What WitnessAudit reads of an image replay: the run id, and no attempt cut short by a crash (an LLM trial's
    training record is written once, by the controller, after the trial ended)."""

    def __init__(self, run_id: Any) -> None:
        self.run_id = run_id
        self._orphaned: set[tuple[str, int]] = set()

    def listen(self, _listener: Any) -> None:
        pass


@dataclass(frozen=True)
class _TrialName:
    trial: str


def witness_audit(events: list[dict[str, Any]], run_id: Any, witness_keys: Mapping[str, bytes]) -> WitnessAudit:
    """The log read by the witness's audit; a line without its fields is a receipt problem (the log's own checks
    say what is wrong with it)."""
    audit = WitnessAudit(_LogView(run_id), witness_keys)  # type: ignore[arg-type]
    for line, ev in enumerate(events, 1):
        try:
            if ev.get("type") == "train_end":
                audit.on_epoch(ev, _TrialName(str(ev.get("trial"))), None, True, line)  # type: ignore[arg-type]
            else:
                audit.on_event(ev, line)
        except (KeyError, TypeError, ValueError):
            audit.receipt_problems.add(line, f"a {ev.get('type')} line without its fields")
    return audit


def trust_checks(run: Mapping[str, Any], events: list[dict[str, Any]], *, registration: Mapping[str, Any] | None,
                 witness_keys: Mapping[str, bytes] | None, records: ServiceRecords | None,
                 rules_version: str | None = None) -> Judged:
    """The `system.*` and `witness.*` checks of the run (`run` its run.json, `events` its main log), with the
    thresholds of the image rules `rules_version` (the service's own; None: the current ones)."""
    th = R.thresholds(rules_version or R.RULES_VERSION)
    hw = hardware.hardware_of(run, registration)
    precision = run.get("precision")
    peak, how = hw.peak(precision, th.get("cpu_clock_ghz"))
    run_system = run.get("system") if isinstance(run.get("system"), Mapping) else {}
    assert isinstance(run_system, Mapping)
    checks = [R.check_registered(hw, run_system.get("id")), R.check_peak_known(peak, how, precision),
              R.check_facts(hw, run_system, [], {}, bool(th.get("facts_exact")))]
    witness, checked = witness_audit(events, run.get("run_id"), witness_keys or {}), bool(witness_keys)
    interval = token_interval(witness.token, th["heartbeat_interval_s"])
    issued_at = token_issued_at(witness.token)
    t0 = events[0].get("t") if events and events[0].get("type") == "run_started" else None
    end = next((e.get("t") for e in reversed(events) if e.get("type") == "run_finished"), None)
    checks += [
        R.check_witness_token(witness.token_problems(run, records), checked),
        R.check_witness_receipts(witness, witness.missing_receipts(records), checked),
        R.check_witness_coverage(_receipt_gaps(witness, issued_at), interval, th, checked),
        R.check_witness_timeline(witness.timeline_problems(t0, end, issued_at, th["witness_tolerance_s"],
                                                           th["witness_duration_relative"]), checked, th),
    ]
    return Judged(checks, hw, peak, how)


def _receipt_gaps(witness: WitnessAudit, issued_at: float | None) -> list[tuple[float, str]]:
    """The witness's gaps without "last epoch -> final receipt": an LLM trial writes one training record when it
    ends (minutes apart on a real preset, and none for a trial the run's end stopped), so that distance measures
    a trial's length, not a stretch the service did not see; the receipts' own gaps and `witness.timeline` (no
    record after the last witnessed heartbeat, the run ending before the last receipt) bound the end."""
    return [g for g in witness.gaps(issued_at) if not g[1].startswith("last epoch")]


def official_presets(rules_version: str | None = None) -> tuple[str, ...]:
    listed = R.thresholds(rules_version or R.RULES_VERSION).get("llm_official_presets")
    return tuple(listed) if isinstance(listed, (list, tuple)) else OFFICIAL_PRESETS


def preset_problem(preset: str | None, rules_version: str | None = None) -> str | None:
    """Why an AIPerf-LLM run of `preset` cannot be official (`division` keeps it open with no check failed), or
    None when the rules admit the preset."""
    official = official_presets(rules_version)
    if preset in official:
        return None
    named = ", ".join(repr(p) for p in official)
    return f"preset {preset!r}: only {named} {'is' if len(official) == 1 else 'are'} official in AIPerf-LLM"


def division(run: Mapping[str, Any], checks: list[dict[str, Any]], rules_version: str | None = None) -> str:
    """official: an official preset, every integrity, validity, stability, plausibility, system and witness
    check passed; else open."""
    groups = ("integrity", "validity", "stability", "plausibility", "system", "witness")
    ok = all(c["passed"] for c in checks if str(c["name"]).split(".", 1)[0] in groups)
    return "official" if ok and run.get("preset") in official_presets(rules_version) else "open"
