"""The hardware a run is judged against, and its peak FLOP/s.

The service judges a run by the system the site **registered** with it (accelerator model,
accelerators per node, nodes, CPU): the peak is this spec's table (`peaks.py`, or a peak a list
maintainer added for a model the table lacks) times the registered count, never what `run.json`
declares. Offline, without a registration (`aiperf-runner verify` without `--system`), the run's
own `system` facts stand in, and the result is marked unregistered.

A registration is a mapping as the service's API gives it (`aiperf-runner system list --json`):
`id`, `name`, `accelerator_model`, `accelerators_per_node`, `nodes`, `cpu_model`, `cpu_cores` (per
node), `status` (`approved` or `pending`), and, where a maintainer added one, `peak_flops`
(per accelerator, per precision).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import peaks

APPROVED = "approved"


def _int(v: Any, default: int = 0) -> int:
    return v if type(v) is int and v >= 0 else default


def _number(v: Any) -> float | None:
    if type(v) not in (int, float) or not math.isfinite(v) or v <= 0:
        return None
    return float(v)


@dataclass(frozen=True)
class Hardware:
    registered: bool  # from the service's registration (else from run.json, the site's own words)
    accelerator_model: str
    accelerators_per_node: int
    nodes: int
    cpu_model: str = ""
    cpu_cores_per_node: int = 0
    system_id: Any = None
    name: str = ""
    status: str = APPROVED
    peak_per_accelerator: Mapping[str, float] = field(default_factory=dict)  # a maintainer's, for unknown models

    @property
    def accelerators(self) -> int:
        return self.accelerators_per_node * self.nodes

    @property
    def is_cpu(self) -> bool:
        return self.accelerators == 0 or self.accelerator_model.lower() == "cpu"

    def describe(self) -> str:
        what = (f"{self.nodes} x {self.cpu_cores_per_node}-core {self.cpu_model or 'CPU'}" if self.is_cpu else
                f"{self.nodes} node(s) x {self.accelerators_per_node} {self.accelerator_model}")
        if self.registered:
            return f"registered system {self.system_id} ({self.name or 'unnamed'}): {what}"
        return f"unregistered: run.json says {what}"

    def peak(self, precision: Any, cpu_ghz: float | None = None) -> tuple[float | None, str]:
        """Peak FLOP/s of the whole system at `precision`, and how it was found. A CPU system's clock is
        `cpu_ghz` where the rules fix one (3.1 on), else the one its model's name states (2.0, 3.0)."""
        if precision not in peaks.PRECISIONS:
            return None, f"precision {precision!r} unknown"
        if self.is_cpu:
            cores = max(self.cpu_cores_per_node, 1) * max(self.nodes, 1)
            model = self.cpu_model or None
            clock = float(cpu_ghz) if cpu_ghz else peaks.cpu_ghz(model)
            return peaks.cpu_peak(cores, clock, precision=precision), (
                f"CPU estimate: {cores} cores x {clock:g} GHz"
                + (" (the rules' clock, never read from a model's name)" if cpu_ghz else "")
                + f" x {peaks.CPU_FLOP_PER_CYCLE[precision]} FLOP/cycle")
        extra = _number(self.peak_per_accelerator.get(precision))
        if extra is not None:
            return extra * self.accelerators, f"{self.accelerators} x {self.accelerator_model} (peak added by the list)"
        acc = peaks.lookup(self.accelerator_model)
        if acc is None:
            return None, f"accelerator {self.accelerator_model!r} is not in the peak table"
        return acc.peak_flops(precision) * self.accelerators, f"{self.accelerators} x {acc.name} ({acc.note})"

    def slot_peak(self, peak: float | None) -> Callable[[int], float | None]:
        """Peak FLOP/s of a slot using `devices` accelerators (CPU: the whole machine bounds a slot)."""
        count = self.accelerators

        def slot_peak(devices: int) -> float | None:
            if not peak:
                return None
            if count and not self.is_cpu:
                return peak * max(int(devices), 1) / count
            return peak

        return slot_peak


def from_registration(reg: Mapping[str, Any]) -> Hardware:
    peak = reg.get("peak_flops")
    return Hardware(True, str(reg.get("accelerator_model") or "cpu"), _int(reg.get("accelerators_per_node")),
                    max(_int(reg.get("nodes"), 1), 1), str(reg.get("cpu_model") or ""), _int(reg.get("cpu_cores")),
                    reg.get("id"), str(reg.get("name") or ""), str(reg.get("status") or APPROVED),
                    dict(peak) if isinstance(peak, Mapping) else {})


def from_run(run: Mapping[str, Any]) -> Hardware:
    """The run's own `system` facts (what a site says; used only where no registration is given)."""
    s = run.get("system") if isinstance(run.get("system"), Mapping) else {}
    assert isinstance(s, Mapping)
    nodes = max(_int(s.get("nodes"), 1), 1)
    count = _int(s.get("accelerator_count"))
    per_node = -(-count // nodes) if count else 0
    cores = _int(s.get("cpu_cores"))
    return Hardware(False, str(s.get("accelerator_model") or "cpu"), per_node, nodes if count else 1,
                    str(s.get("cpu_model") or ""), cores, s.get("id"), str(s.get("name") or ""))


def declared_peak(run: Mapping[str, Any], precision: Any) -> float | None:
    """What run.json declares (a note: never the bound)."""
    declared = run.get("declared_peak_flops")
    return _number(declared.get(precision)) if isinstance(declared, Mapping) and isinstance(precision, str) else None


def hardware_of(run: Mapping[str, Any], registration: Mapping[str, Any] | None) -> Hardware:
    return from_registration(registration) if registration is not None else from_run(run)


def run_peak(run: Mapping[str, Any], registration: Mapping[str, Any] | None = None) -> float | None:
    """The peak FLOP/s a run is judged against (the registration's, else run.json's hardware at the table's)."""
    return hardware_of(run, registration).peak(run.get("precision"))[0]


def efficiency(score_ops: float, run: Mapping[str, Any], registration: Mapping[str, Any] | None = None
               ) -> float | None:
    """Score as a share of the run's peak (None when no peak is known)."""
    peak = run_peak(run, registration)
    return score_ops / peak if peak else None


class SeenAccelerators:
    """A replay listener: the device models the trials' logs say they ran on (`accelerators` of the
    first epoch of each attempt: {model: ranks}), summed over attempts. Older logs name none."""

    def __init__(self) -> None:
        self.ranks: dict[str, int] = {}

    def on_epoch(self, ev: Mapping[str, Any], trial: Any, attempt: Any, counted: bool, line: int) -> None:
        seen = ev.get("accelerators")
        if type(seen) is dict:
            for model, n in seen.items():
                if type(n) is int and n > 0:
                    self.ranks[str(model)] = self.ranks.get(str(model), 0) + n

    def not_registered(self, hw: Hardware) -> list[str]:
        """The models seen that are not `hw`'s (a heterogeneous partition, a registration out of date, a system
        registered as other hardware than it has): `system.facts` fails on them. The peak table's names
        match drivers' variants; an unknown name matches when one contains the other."""
        return sorted(m for m in self.ranks if not _same_model(m, hw))


def _same_model(seen: str, hw: Hardware) -> bool:
    if hw.is_cpu or seen.lower() == "cpu":
        return hw.is_cpu and seen.lower() == "cpu"
    known, registered = peaks.lookup(seen), peaks.lookup(hw.accelerator_model)
    if known is not None and registered is not None:
        return known.name == registered.name
    return hw.accelerator_model.lower() in seen.lower() or seen.lower() in hw.accelerator_model.lower()
