"""The stability and plausibility checks of an AIPerf-LLM run: what the image workload asks of its log, asked of
the LLM log's trials (spec/llmverify.py calls `checks` once the story and the system's peak are known).

- `stability.score_cv`: the score series (a point per finished trial) steady over the run's last half;
- `plausibility.declared_peak`, `plausibility.score_peak`: as for images;
- `plausibility.trial_rate`: no trial trained faster than its slot's share of the peak (its `train_end`
  FLOPs, as the rules count them, over its own training time) — the image workload's `epoch_rate`, a trial
  being the LLM log's unit of training record;
- `plausibility.slot_exclusive`, `plausibility.concurrency`: no slot ran two trials at once, no more trials
  ran at once than the run has slots (a slot's attempt runs from `trial_started` to its `trial_finished`,
  `trial_failed` or `trial_cancelled`; a resume ends those a killed controller left open);
- `plausibility.timestamps`: the log's times never go back.

Their thresholds are the image rules' (the service's own version): the same bounds on the same quantities.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import rules as R
from .hardware import Hardware, declared_peak

MOST_LISTED = 5  # problems quoted per check; the count is always whole


@dataclass
class _Findings:
    count: int = 0
    quoted: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.quoted) < MOST_LISTED:
            self.quoted.append(message)

    def text(self, ok: str) -> str:
        if not self.count:
            return ok
        more = f" (and {self.count - len(self.quoted)} more)" if self.count > len(self.quoted) else ""
        return "; ".join(self.quoted) + more


@dataclass
class Occupancy:
    """The slots' attempts and the trials' training rates, fed each line of the main log in order by the verifier's
    one pass over it (spec/llmverify.py `_Story`); `slots`, `devices`: run_started's (what the run token binds)."""

    slots: int
    devices: int = 1
    open: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)  # attempt -> (slot, started)
    slot_clash: _Findings = field(default_factory=_Findings)
    concurrency: _Findings = field(default_factory=_Findings)
    timestamps: _Findings = field(default_factory=_Findings)
    max_concurrency: int = 0
    rates: list[tuple[str, float]] = field(default_factory=list)  # (trial, FLOP/s) of each training record
    last_t: float | None = None

    @classmethod
    def starting(cls, run_started: Mapping[str, Any]) -> Occupancy:
        return cls(slots=_int(run_started.get("slots")), devices=max(_int(run_started.get("devices_per_slot")), 1))

    def read(self, number: int, ev: Mapping[str, Any], flops: int | None) -> None:
        """Line `number` of the log; `flops`: the rules' count of a `train_end` the story accepted (else None)."""
        t = ev.get("t")
        if not isinstance(t, (int, float)):
            return
        if self.last_t is not None and t < self.last_t:
            self.timestamps.add(f"line {number} ({ev.get('type')}) is {self.last_t - t:.3f} s before the line above")
        self.last_t = float(t) if self.last_t is None else max(self.last_t, float(t))
        kind = ev.get("type")
        if kind == "run_resumed":  # the attempts a killed controller left running ended with it
            self.open.clear()
        elif kind == "trial_started":
            self._start((str(ev.get("trial")), _int(ev.get("attempt"))), _int(ev.get("slot"), -1))
        elif kind in ("trial_finished", "trial_failed", "trial_cancelled"):
            self.open.pop((str(ev.get("trial")), _int(ev.get("attempt"))), None)
        elif kind == "train_end":
            began, ended = ev.get("started_at"), ev.get("ended_at")
            if flops and isinstance(began, (int, float)) and isinstance(ended, (int, float)):
                seconds = float(ended) - float(began)
                self.rates.append((str(ev.get("trial")), flops / seconds if seconds > 0 else float("inf")))

    def _start(self, attempt: tuple[str, int], slot: int) -> None:
        if not 0 <= slot < max(self.slots, 1):
            self.slot_clash.add(f"{attempt[0]} started on slot {slot}, the run has {self.slots}")
        busy = [a for a, (s, _) in self.open.items() if s == slot]
        if busy:
            self.slot_clash.add(f"{attempt[0]} started on slot {slot} while {busy[0][0]} ran there")
        self.open[attempt] = (slot, self.last_t or 0.0)
        self.max_concurrency = max(self.max_concurrency, len(self.open))
        if len(self.open) > max(self.slots, 1):
            self.concurrency.add(f"{len(self.open)} trials ran at once when {attempt[0]} started, on "
                                 f"{self.slots} slots")


def checks(occupancy: Occupancy, series: list[dict[str, float]], run: Mapping[str, Any], hw: Hardware,
           peak: float | None, how: str, th: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The stability and plausibility checks; `peak` is the whole system's (None where unknown)."""
    precision = run.get("precision")
    max_score = max((p["score"] for p in series), default=0.0)
    return [R.check_stability(series, th),
            R.check_declared_peak(declared_peak(run, precision), peak, how, precision, th),
            R.check_score_peak(max_score, peak, th),
            _trial_rate(occupancy, _slot_devices(occupancy.devices, hw), hw.slot_peak(peak), th),
            R.check("plausibility.slot_exclusive", 0, occupancy.slot_clash.count, not occupancy.slot_clash.count,
                    occupancy.slot_clash.text("no slot ran two trials at once")),
            R.check("plausibility.concurrency", occupancy.slots, occupancy.max_concurrency,
                    not occupancy.concurrency.count, occupancy.concurrency.text(
                        f"at most {occupancy.max_concurrency} trials ran at once on {occupancy.slots} slots")),
            R.check("plausibility.timestamps", 0, occupancy.timestamps.count, not occupancy.timestamps.count,
                    occupancy.timestamps.text("the log's times never go back"))]


def _slot_devices(devices: int, hw: Hardware) -> int:
    """A slot's accelerators as the run declares them, never more than the system the run is judged by has (its
    registration, for a registered system): a larger claim would raise the slot's share of the peak."""
    return min(devices, hw.accelerators) if hw.accelerators and not hw.is_cpu else devices


def _trial_rate(occupancy: Occupancy, devices: int, slot_peak: Callable[[int], float | None],
                th: Mapping[str, Any]) -> dict[str, Any]:
    name, bound = "plausibility.trial_rate", th["max_epoch_to_peak"]
    peak = slot_peak(devices)
    if peak is None:
        return R.check(name, bound, None, True, "not checked: no peak FLOP/s known (see system.peak)")
    if not occupancy.rates:
        return R.check(name, bound, None, True, "no trial trained")
    too_fast, fastest, fastest_ratio = _Findings(), None, 0.0
    for trial, rate in occupancy.rates:
        ratio = rate / peak if peak else float("inf")
        if ratio > fastest_ratio or fastest is None:
            fastest, fastest_ratio = (trial, rate), ratio
        if ratio > bound:
            too_fast.add(f"{trial} trained at {rate:.4g} FLOP/s, {ratio:.1%} of its slot's peak {peak:.4g}")
    assert fastest is not None
    return R.check(name, bound, fastest_ratio, not too_fast.count, too_fast.text(
        f"fastest trial {fastest[0]} trained at {fastest[1]:.4g} FLOP/s, {fastest_ratio:.1%} of its slot's peak"))


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
