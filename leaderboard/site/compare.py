"""`/compare?systems=1,2,3`: two to four systems side by side: hardware and peak, their runs (best of N,
median, spread), the best result's efficiency and rank, their rank in each edition, and the software stack
their best run recorded."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from leaderboard import listcache
from leaderboard.models import Division, EditionEntry, Result, System, public_edition_q
from leaderboard.site import format as fmt
from leaderboard.site import queries

MAX_SYSTEMS = 4


def _ids(raw: list[str]) -> list[int]:
    ids: list[int] = []
    for part in ",".join(raw).split(","):
        part = part.strip()
        if part.isdigit() and int(part) not in ids:
            ids.append(int(part))
    return ids[:MAX_SYSTEMS]


def _column(s: System, editions: list[str], workload: str) -> dict[str, Any]:
    results = list(queries.visible_results().filter(system=s, workload=workload).only(
        "pk", "division", "score_ops", "efficiency", "precision", "rank", "rank_all", "peak_flops"))
    official = [r for r in results if r.division == Division.OFFICIAL]
    pool = official or results
    best = max(pool, key=lambda r: r.score_ops, default=None)
    ranks = dict(EditionEntry.objects.filter(public_edition_q(), result__system=s, rank__isnull=False,
                                             result__workload=workload, division=best.division if best else "")
                 .values_list("edition__name", "rank"))
    # The best run's stack alone: one key of its report, not every report of the system.
    software = (Result.objects.filter(pk=best.pk).values_list("report__software", flat=True).first()
                if best is not None else None)
    return {
        "s": s, "label": fmt.system_label(s), "site": s.site.name,
        "hardware": (f"{s.accelerator_count} × {s.accelerator_model}" if s.accelerator_count
                     else s.cpu_model or "CPU"), "nodes": s.nodes, "interconnect": s.interconnect or "–",
        "registered": s.registered and s.status == System.Status.APPROVED,
        "division": best.division if best else "–", "runs": len(pool),
        **fmt.runs([r.score_ops for r in pool]), "best_pk": best.pk if best else None,
        "efficiency": fmt.percent(best.efficiency) if best and best.efficiency is not None else "–",
        "precision": best.precision if best else "–", "peak": fmt.flops(best.peak_flops) if best else "–",
        "rank": best.rank if best and best.rank is not None else "–",
        "editions": [ranks.get(name, "–") for name in editions],
        "software": ", ".join(f"{k} {v}" for k, v in software.items()) if isinstance(software, dict) and software
        else "–",
    }


@listcache.cached_page("site")
def compare(request: HttpRequest) -> HttpResponse:
    ids = _ids(request.GET.getlist("systems"))
    # One list at a time: AIPerf-LLM's FLOPs are counted by other rules, so its runs are compared among themselves.
    workload = "llm" if request.GET.get("workload") in queries.WORKLOADS else "image"
    systems = {s.pk: s for s in System.objects.select_related("site").filter(pk__in=ids)}
    chosen = [systems[pk] for pk in ids if pk in systems]
    editions = list(queries.frozen_editions().order_by("-frozen_at").values_list("name", flat=True)[:4])
    columns = [_column(s, editions, workload) for s in chosen]
    return render(request, "site/compare.html", {
        "columns": columns, "ids": ",".join(str(s.pk) for s in chosen), "workload": workload,
        "list_name": fmt.list_label(workload),
        "edition_rows": [{"name": name, "ranks": [c["editions"][i] for c in columns]} for i, name in enumerate(editions)],
        "max": MAX_SYSTEMS, "nav": "list"}, status=200)
