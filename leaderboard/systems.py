"""Registered systems: what a result is judged by (docs/design.md section 7, layer 1).

A site registers a system (`POST /api/v1/systems/`): known accelerator models (spec/peaks.py's table,
a peak a maintainer added, or `cpu`) are approved at once unless `AIPERF_SYSTEM_APPROVAL=manual`; a
model the table lacks waits `pending` until a list maintainer adds its peak (`AcceleratorPeak`),
which approves every pending system of that model and re-verifies their results. A maintainer
approves or rejects a system by hand (`decide`: the admin's actions and `manage.py aiperf_system`),
with the reason on its record; its results are re-verified under the new status.
"""

from __future__ import annotations

from typing import Any

from aiperf_runner.spec import peaks
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from leaderboard.models import AcceleratorPeak, Site, Submission, System

S = System.Status


def is_cpu(model: str) -> bool:
    return model.strip().lower() == "cpu"


def added_peaks() -> dict[str, AcceleratorPeak]:
    """The maintainers' figures by model name (lower case): read once for a page of systems."""
    return {p.accelerator_model.strip().lower(): p for p in AcceleratorPeak.objects.all()}


def known_peak(model: str, added_by_model: dict[str, AcceleratorPeak] | None = None) -> dict[str, float] | None:
    """Per-accelerator peak FLOP/s per precision: a maintainer's figure, else the table's; None if unknown.
    `added_by_model`: added_peaks(), when a page of systems is read."""
    added = (added_by_model.get(model.strip().lower()) if added_by_model is not None else
             AcceleratorPeak.objects.filter(accelerator_model__iexact=model.strip()).first())
    if added is not None:
        return added.per_precision()
    acc = peaks.lookup(model)
    return {p: acc.peak_flops(p) for p in peaks.PRECISIONS} if acc is not None else None


def vendor_of(model: str) -> str:
    if is_cpu(model):
        return "CPU"
    added = AcceleratorPeak.objects.filter(accelerator_model__iexact=model.strip()).first()
    if added is not None:
        return added.vendor
    acc = peaks.lookup(model)
    return acc.vendor if acc is not None else ""


def register(site: Site, fields: dict[str, Any]) -> System:
    """A new registered system of `site` (approved or pending, with the reason)."""
    model = str(fields["accelerator_model"]).strip()
    per_node = 0 if is_cpu(model) else int(fields["accelerators_per_node"])
    nodes = int(fields["nodes"])
    system = System(site=site, name=fields["name"], accelerator_model="cpu" if is_cpu(model) else model,
                    accelerators_per_node=per_node, accelerator_count=per_node * nodes, nodes=nodes,
                    interconnect=fields.get("interconnect") or "", cpu_model=fields.get("cpu_model") or "",
                    cpu_cores=int(fields.get("cpu_cores") or 0), memory_per_node=int(fields.get("memory_per_node") or 0),
                    vendor=vendor_of(model), registered=True)
    system.status, system.status_reason = initial_status(system)
    system.identity = f"registered-{timezone.now().timestamp():.6f}-{site.pk}"
    system.save()
    system.identity = f"registered-{system.pk}"
    system.save(update_fields=["identity"])
    return system


def initial_status(system: System) -> tuple[str, str]:
    if settings.AIPERF_SYSTEM_APPROVAL == "manual":
        return S.PENDING, "this service approves every system by hand: a list maintainer will look at it"
    if is_cpu(system.accelerator_model):
        if not system.cpu_cores:
            return S.PENDING, "a CPU system needs its cores per node (cpu_cores) for its peak"
        return S.APPROVED, ""
    if known_peak(system.accelerator_model) is None:
        return S.PENDING, (f"{system.accelerator_model!r} is not in the peak table: a list maintainer must add "
                           "its peak FLOP/s per precision, with a source")
    return S.APPROVED, ""


def registration(system: System) -> dict[str, Any] | None:
    """The registration verify() judges a run by (spec/hardware.py); None for an unregistered system."""
    if not system.registered:
        return None
    reg: dict[str, Any] = {"id": system.pk, "name": system.name, "accelerator_model": system.accelerator_model,
                           "accelerators_per_node": system.accelerators_per_node, "nodes": system.nodes,
                           "interconnect": system.interconnect, "cpu_model": system.cpu_model,
                           "cpu_cores": system.cpu_cores, "status": system.status}
    if not is_cpu(system.accelerator_model) and peaks.lookup(system.accelerator_model) is None:
        added = known_peak(system.accelerator_model)
        if added is not None:
            reg["peak_flops"] = added
    return reg


@transaction.atomic
def peak_added(peak: AcceleratorPeak) -> list[int]:
    """A maintainer added a model's peak: approve its pending systems; the submissions to re-verify."""
    pending = System.objects.filter(registered=True, status=S.PENDING,
                                    accelerator_model__iexact=peak.accelerator_model)
    if settings.AIPERF_SYSTEM_APPROVAL != "manual":
        pending.update(status=S.APPROVED, status_reason="", vendor=peak.vendor)
    ids = list(Submission.objects.filter(
        result__system__accelerator_model__iexact=peak.accelerator_model,
        status__in=[Submission.Status.VERIFIED, Submission.Status.PUBLISHED]).values_list("pk", flat=True))
    return ids


def decide(systems: Any, approve: bool, reason: str, by: str) -> tuple[int, list[int]]:
    """A maintainer approves or rejects registered systems: (how many changed, the submissions to re-verify).
    The reason and who decided go on the system's record (`status_reason`, shown on its page and in the API)."""
    reason = reason.strip()
    if not reason:
        raise ValueError("a decision needs its reason")
    status = S.APPROVED if approve else S.REJECTED
    note = f"{'approved' if approve else 'rejected'} by {by}: {reason}"[:300]
    with transaction.atomic():
        changed = list(systems.filter(registered=True).exclude(status=status).values_list("pk", flat=True))
        System.objects.filter(pk__in=changed).update(status=status, status_reason=note)
        ids = list(Submission.objects.filter(result__system__in=changed).values_list("pk", flat=True))
    return len(changed), ids
