"""The public pages: the ranked list and its editions, systems, sites, statistics, methodology (a result's
page: resultpage.py).

Every figure shown is one the service stored when it verified a bundle with `aiperf_runner.spec`
(leaderboard/pipeline.py); the pages format and draw them, they never compute a score.
The list works without JavaScript: filters are a GET form, sorting is links, everything is in the URL,
and `?format=csv` / `?format=json` on any list URL downloads exactly the rows that URL shows.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import aiperf_runner
from aiperf_runner.spec import SPEC_VERSION, llmtrust, scoring
from aiperf_runner.spec import rules as spec_rules
from aiperf_runner.spec.llmrules import LLM_PRESETS
from django.conf import settings
from django.db.models import Count, Max, Q
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from leaderboard import listcache, ranking
from leaderboard.attempts import attempt_counts
from leaderboard.models import (
    LLM_RULES,
    Division,
    Edition,
    EditionEntry,
    Result,
    Site,
    System,
    public_edition_q,
)
from leaderboard.pipeline import VERIFIER_VERSION
from leaderboard.site import charts, queries
from leaderboard.site import format as fmt
from leaderboard.site.queries import SORTS, ListParams
from leaderboard.systems import is_cpu, known_peak

# ---- the list ------------------------------------------------------------------------------------

@listcache.cached_page("site")
def ranked_list(request: HttpRequest, name: str | None = None) -> HttpResponse:
    """`/` (the live list, or `?edition=NAME`) and `/editions/NAME/` (a frozen edition)."""
    out = request.GET.get("format", "")
    params = ListParams.from_query(request.GET, edition=name or "", allow_all=out in ("csv", "json"))
    try:
        view = queries.ranked_list(params, with_options=out not in ("csv", "json"))
    except Edition.DoesNotExist:
        raise Http404(f"no frozen edition named {params.edition!r}") from None
    if out == "csv":
        return _list_csv(request, view)
    if out == "json":
        return _list_json(request, view)

    path = request.path
    in_path = name is not None  # the edition is in the path: keep it out of the query string

    def q(**changes: Any) -> str:
        if in_path:
            changes.setdefault("edition", None)
        s = params.query(**changes)
        return f"{path}?{s}" if s else path

    headers = []
    current, desc = params.sort.lstrip("-"), params.sort.startswith("-")
    both = not queries.shown_division(params)  # the review list: a Division column; one division: the tab says
    llm = params.workload == "llm"
    for key, (label, _fields, first_desc) in SORTS.items():
        if (key == "division" and not both) or key == ("accuracy" if llm else "loss"):
            continue
        if key == current:
            nxt = key if desc else f"-{key}"
            aria = "descending" if desc else "ascending"
            if key == "rank":
                aria = "descending" if desc else "ascending"
        else:
            nxt = f"-{key}" if first_desc else key
            aria = None
        headers.append({"key": key, "label": label, "href": q(sort=nxt if nxt != "rank" else None, page=None),
                        "aria_sort": aria, "numeric": key in ("rank", "nodes", "score", "regulated", "accuracy",
                                                              "loss", "efficiency")})
    page = view.page
    pages = None
    if page is not None and page.paginator.num_pages > 1:
        pages = {"number": page.number, "count": page.paginator.num_pages,
                 "first": q(page=None) if page.number > 1 else None,
                 "prev": q(page=page.previous_page_number() if page.previous_page_number() > 1 else None)
                 if page.has_previous() else None,
                 "next": q(page=page.next_page_number()) if page.has_next() else None,
                 "last": q(page=page.paginator.num_pages) if page.number < page.paginator.num_pages else None,
                 "start": page.start_index(), "end": page.end_index()}
    edition = view.edition
    admitted = set(edition.rules_versions if edition is not None and edition.rules_versions
                   else ranking.official_rules())
    previous = queries.previous_ranks(edition) if edition is not None else None
    if previous is not None:  # an edition after the first: each system's rank in the one before, or "new"
        headers.insert(1, {"key": "previous", "label": "Previous", "href": "", "aria_sort": None, "numeric": True})
    context = {
        "view": view, "params": params, "rows_html": _rows_html(view.rows, admitted, previous, both, llm),
        "llm": llm, "llm_official": ", ".join(llmtrust.official_presets(settings.AIPERF_RULES_VERSION or None)),
        "workload_tabs": [{"label": label, "current": params.workload == value,
                           "href": q(workload=value or None, rules=None, version=None, page=None, sort=None)}
                          for value, label in (("", "AIPerf"), ("llm", "AIPerf-LLM"))],
        "headers": headers,
        "pages": pages,
        "edition": edition, "editions": list(queries.frozen_editions().values_list("name", flat=True)),
        "divisions": Division.choices, "per_choices": queries.PER_PAGE_CHOICES,
        "shown_division": queries.shown_division(params),
        "division_tabs": [{"label": label, "current": queries.shown_division(params) == value,
                           "href": q(division=value if value != Division.OFFICIAL else None, page=None)}
                          for value, label in Division.choices],
        "download": {
            "csv": q(format="csv"), "json": q(format="json"),
            "all_csv": q(format="csv", page=None, per="all"), "all_json": q(format="json", page=None, per="all"),
        },
        "canonical": reverse("edition", args=[edition.name]) if edition and not in_path else None,
        "reset": path, "form_action": reverse("home"),
        "nav": "editions" if edition else "list",
    }
    return render(request, "site/list.html", context)


class _Urls:
    """reverse() once per page, then fill in ids (a list page has hundreds of links)."""

    def __init__(self) -> None:
        self.result = reverse("result", args=[987654321]).replace("987654321", "{}")
        self.system = reverse("system-page", args=[987654321]).replace("987654321", "{}")
        self.site = reverse("site-page", args=[987654321]).replace("987654321", "{}")


def _rows_html(rows: list[queries.Row], admitted: set[str],
               previous: dict[tuple[int, str], int] | None = None, with_division: bool = True,
               llm: bool = False) -> SafeString:
    """The <tr> of the list, built here rather than in the template: 100 rows x 13 cells render ~5x faster.
    A result verified under rules the list's official ranking does not admit says which. AIPerf-LLM's list
    shows the best validation loss where the image list shows the best accuracy."""
    urls = _Urls()
    out = []
    for row in rows:
        r, s, site = row.result, row.result.system, row.result.site
        accel = (f'{escape(s.accelerator_model)} <span class="count-x">× {s.accelerator_count}</span>'
                 if s.accelerator_count else escape(s.cpu_model or "CPU"))
        date = getattr(r, "ldate", None) or r.verified_at
        out.append(
            f'<tr data-result="{r.pk}">'
            f'<td class="num col-rank">{row.rank if row.rank is not None else "–"}</td>'
            f'{_previous_cell(previous, s.pk, row.division)}'
            f'<td class="col-system"><a href="{urls.system.format(s.pk)}">{escape(fmt.system_label(s))}</a></td>'
            f'<td class="col-site"><a href="{urls.site.format(site.pk)}">{escape(site.name)}</a></td>'
            f'<td class="col-country"><abbr title="{escape(fmt.country(site.country))}">{escape(site.country)}</abbr></td>'
            f'<td class="col-accelerator">{accel}</td>'
            f'<td class="num col-nodes">{s.nodes}</td>'
            f'<td class="num col-score"><a href="{urls.result.format(r.pk)}" data-score="{row.score!r}">'
            f'{fmt.ops(row.score)}</a></td>'
            f'<td class="num col-regulated">{fmt.ops(row.regulated)}</td>'
            + (f'<td class="num col-loss">{fmt.loss(r.best_loss)}</td>' if llm else
               f'<td class="num col-accuracy">{fmt.percent(r.max_accuracy, 2)}</td>') +
            f'<td class="num col-efficiency">{fmt.percent(r.efficiency) if r.efficiency is not None else "–"}</td>'
            f'<td class="col-precision">{escape(r.precision or "–")}</td>'
            f'<td class="col-trust">{_trust_marks(r)}{_older_rules(r.rules_version, admitted)}</td>'
            + (f'<td class="col-division"><span class="tag tag-{escape(row.division)}">{escape(row.division)}</span>'
               '</td>' if with_division else '') +
            f'<td class="col-level"><span class="tag tag-{escape(r.verification_level)}">'
            f'{escape(fmt.level_label(r.verification_level))}</span></td>'
            f'<td class="col-date">{fmt.date(date)}</td></tr>')
    return mark_safe("\n".join(out))


def _trust_marks(r: Result) -> str:
    """The trust line in a list cell: R(egistered), W(itnessed), A(udited) and V (a maintainer's review, when
    one was needed), each with its words for a pointer and a screen reader."""
    t = r.trust()
    marks = [(t["registered"], "R", "system registered and approved" if t["registered"] else "system not registered"),
             (t["witnessed"], "W", "run witnessed by the service" if t["witnessed"] else "run not witnessed"),
             (None if t["audit"] == "demo" else t["audit"] == "passed", "A",
              "audit of the work: demo data, nothing to audit" if t["audit"] == "demo" else
              f"audit of the work: {t['audit']}")]
    if t["review"] != "not needed":
        marks.append((t["review"] == "approved", "V", f"review: {t['review']}"))
    # Neither yes nor no (None): a demo result's audit, generated figures having no work to re-execute.
    cells = "".join(f'<span class="trust-{"neutral" if ok is None else "ok" if ok else "no"}" title="{escape(words)}">'
                    f'{letter}<span class="visually-hidden"> ({escape(words)})</span></span>'
                    for ok, letter, words in marks)
    return f'<span class="trustmarks">{cells}</span>'


def _previous_cell(previous: dict[tuple[int, str], int] | None, system_id: int, division: str) -> str:
    if previous is None:
        return ""
    rank = previous.get((system_id, division))
    return (f'<td class="num col-previous">{rank}</td>' if rank is not None else
            '<td class="num col-previous"><span class="tag tag-new" title="not in the previous edition">new</span></td>')


def _runs_summary(results: list[Result]) -> list[dict[str, Any]]:
    """Per list and division: runs, best, median and spread (max / min - 1) of the scores of a system's results
    (AIPerf-LLM's apart: its FLOPs are counted by other rules)."""
    out = []
    for workload in (Result.Workload.IMAGE, Result.Workload.LLM):
        for division in (Division.OFFICIAL, Division.OPEN):
            scores = [r.score_ops for r in results if r.division == division and r.workload == workload]
            if scores:
                out.append({"list": fmt.list_label(workload), "division": division, "runs": len(scores),
                            **fmt.runs(scores)})
    return out


def _edition_ranks(s: System) -> list[dict[str, Any]]:
    """The system's rank in each public edition (its best entry there), newest first."""
    rows = (EditionEntry.objects.filter(public_edition_q(), result__system=s, rank__isnull=False)
            .select_related("edition", "result").only("edition__name", "result__workload", "division", "rank",
                                                      "score_ops", "result_id").order_by("-edition__frozen_at"))
    return [{"edition": e.edition.name, "list": fmt.list_label(e.result.workload), "division": e.division,
             "rank": e.rank, "score": fmt.ops(e.score_ops), "result": e.result_id} for e in rows]


def _older_rules(version: str, admitted: set[str]) -> str:
    if not version or version in admitted:
        return ""
    return (f' <span class="tag tag-rules" title="verified under rules {escape(version)}, not admitted to this '
            f'list\'s official ranking">rules {escape(version)}</span>')


EXPORT_FIELDS = ["rank", "division", "result_id", "url", "system", "system_id", "site", "site_id",
                 "country", "vendor", "accelerator_model", "accelerator_count", "nodes", "score_ops",
                 "regulated_score_ops", "max_accuracy", "efficiency", "peak_flops", "verification_level", "precision", "preset",
                 "duration_s", "rules_version", "registered", "witnessed", "audit", "review", "date", "workload", "best_loss"]


def _export_rows(request: HttpRequest, view: queries.ListView) -> list[dict[str, Any]]:
    out = []
    for row in view.rows:
        r, s = row.result, row.result.system
        date = getattr(r, "ldate", None) or r.verified_at
        out.append({
            "rank": row.rank, "workload": r.workload, "division": row.division, "result_id": r.pk,
            "url": request.build_absolute_uri(reverse("result", args=[r.pk])),
            "system": fmt.system_label(s), "system_id": s.pk, "site": r.site.name, "site_id": r.site_id,
            "country": r.site.country, "vendor": s.vendor, "accelerator_model": s.accelerator_model,
            "accelerator_count": s.accelerator_count, "nodes": s.nodes, "score_ops": row.score,
            "regulated_score_ops": row.regulated, "max_accuracy": r.max_accuracy, "best_loss": r.best_loss,
            "efficiency": r.efficiency,
            "peak_flops": r.peak_flops, "verification_level": r.verification_level, "precision": r.precision,
            "preset": r.preset, "duration_s": r.duration_s, "rules_version": r.rules_version,
            **{k: v for k, v in r.trust().items()}, "date": date.isoformat() if date else None,
        })
    return out


def _export_name(view: queries.ListView, ext: str) -> str:
    parts = ["aiperf", view.edition.name if view.edition else "live"]
    parts += [f"{k}-{v}" for k, v in view.params.filters().items() if k != "edition"]
    if view.page is not None and view.page.paginator.num_pages > 1:
        parts.append(f"page-{view.page.number}")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in "_".join(parts))
    return f"{safe}.{ext}"


def _list_csv(request: HttpRequest, view: queries.ListView) -> HttpResponse:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=EXPORT_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(_export_rows(request, view))
    response = HttpResponse(buf.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_export_name(view, "csv")}"'
    return response


def _list_json(request: HttpRequest, view: queries.ListView) -> HttpResponse:
    p = view.params
    body = {
        "list": view.edition.name if view.edition else "live",
        "filters": {k: v for k, v in p.filters().items() if k != "edition"},
        "sort": p.sort, "page": view.page.number if view.page is not None else None,
        "per_page": p.per, "count": view.total, "results": _export_rows(request, view),
    }
    response = JsonResponse(body, json_dumps_params={"indent": 1})
    response["Content-Disposition"] = f'attachment; filename="{_export_name(view, "json")}"'
    return response


def editions(request: HttpRequest) -> HttpResponse:
    upcoming = [{"edition": e, "state": e.state(), "open": fmt.date(e.submissions_open),
                 "close": fmt.date(e.submissions_close), "publish": fmt.date(e.publish_at)} for e in queries.calendar()]
    rows = [{"edition": e, "url": reverse("edition", args=[e.name]), "n": e.n, "results": e.results, "llm": e.llm,
             "top": fmt.ops(e.top),
             "total": fmt.ops(e.total), "frozen": fmt.date(e.frozen_at)} for e in queries.edition_index()]
    return render(request, "site/editions.html", {"rows": rows, "upcoming": upcoming, "nav": "editions"})


# ---- systems and sites ---------------------------------------------------------------------------

def _results_table(results: list[Result]) -> list[dict[str, Any]]:
    """Rows of a system's or a site's results; `rank` is the stored live rank (None off the live list)."""
    live_ids = set(Result.objects.live().filter(pk__in=[r.pk for r in results]).values_list("pk", flat=True))
    return [{
        "r": r, "url": reverse("result", args=[r.pk]), "rank": r.rank if r.pk in live_ids else None,
        "live": r.pk in live_ids,
        "score": fmt.ops(r.score_ops), "regulated": fmt.ops(r.regulated_score_ops),
        "accuracy": fmt.loss(r.best_loss) if r.workload == Result.Workload.LLM else fmt.percent(r.max_accuracy, 2),
        "efficiency": fmt.percent(r.efficiency) if r.efficiency is not None else "–",
        "date": fmt.date(r.published_at or r.verified_at), "duration": fmt.duration(r.duration_s),
        "level_label": fmt.level_label(r.verification_level),
        "system_label": fmt.system_label(r.system), "system_url": reverse("system-page", args=[r.system_id]),
    } for r in results]


def _system_peaks(s: System) -> list[tuple[str, str]]:
    """(label, value) of a system's peak per precision, for the whole system: a registered system's from the list's
    peak table (its results are judged by it), an unregistered one's as its run.json declared it."""
    if not s.registered:
        return [(f"Declared peak, {p}", fmt.flops(v)) for p, v in sorted((s.peak_flops or {}).items())
                if isinstance(v, (int, float))]
    per_device = None if is_cpu(s.accelerator_model) else known_peak(s.accelerator_model)
    if not per_device or not s.accelerator_count:
        return []
    return [(f"Peak, {p}", f"{fmt.flops(v * s.accelerator_count)} ({s.accelerator_count} × {fmt.flops(v)}, "
                           "the list's peak table)") for p, v in sorted(per_device.items())]


def system(request: HttpRequest, pk: int) -> HttpResponse:
    s = get_object_or_404(System.objects.select_related("site"), pk=pk)
    results = list(queries.visible_results().filter(system=s).select_related("site", "system").defer("report")
                   .order_by("verified_at", "pk"))
    table = _results_table(results)
    charts_html = {}
    for key, workload in (("history", Result.Workload.IMAGE), ("history_llm", Result.Workload.LLM)):
        of = [r for r in results if r.workload == workload]  # one chart per list: other FLOP rules, other units
        if of:
            charts_html[key] = charts.score_history(
                ({"date": (r.published_at or r.verified_at).isoformat(), "score": r.score_ops,
                  "regulated": r.regulated_score_ops, "label": f"result {r.pk}"} for r in of),
                "chart-history" if workload == Result.Workload.IMAGE else "chart-history-llm")
    family = list(queries.visible_results().filter(site=s.site, system__accelerator_model=s.accelerator_model,
                                                   workload=Result.Workload.IMAGE)
                  .select_related("system").defer("report").order_by("system__nodes", "pk"))
    # Like with like: the official division's results when there are any (open runs use smaller workloads).
    scaling_division = Division.OFFICIAL if any(r.division == Division.OFFICIAL for r in family) else ""
    if scaling_division:
        family = [r for r in family if r.division == scaling_division]
    if family:
        charts_html["scaling"] = charts.scaling(
            [{"nodes": r.system.nodes, "score": r.score_ops, "system_id": r.system_id,
              "label": f"result {r.pk} ({r.system.accelerator_count} × {r.system.accelerator_model})"}
             for r in family], s.pk)
    peaks = _system_peaks(s)
    siblings = (System.objects.filter(site=s.site, accelerator_model=s.accelerator_model).exclude(pk=s.pk)
                .order_by("nodes"))
    attempts = attempt_counts(s) if s.registered else None  # one query for the three rows below
    context = {
        "s": s, "label": fmt.system_label(s), "table": table, "charts": charts_html, "peaks": peaks,
        "summary": _runs_summary(results), "edition_ranks": _edition_ranks(s),
        "siblings": list(siblings), "family_nodes": sorted({r.system.nodes for r in family}),
        "scaling_division": scaling_division,
        "facts": [
            ("Site", s.site.name), ("Vendor", s.vendor or "–"),
            ("Accelerator", f"{s.accelerator_count} × {s.accelerator_model}" if s.accelerator_count else "none (CPU)"),
            ("Nodes", f"{s.nodes:,}"), ("Interconnect", s.interconnect or "–"),
            ("CPU", f"{s.cpu_model or '–'}" + (f" ({s.cpu_cores} cores)" if s.cpu_cores else "")),
            ("Registration", s.get_status_display() + (f": {s.status_reason}" if s.status_reason else "")),
            ("Runs attempted / submitted / verified",
             "{attempted} / {submitted} / {verified}".format(**attempts) if attempts else "– (unregistered)"),
            ("Abandoned runs (no submission within a week)", f"{attempts['abandoned']}" if attempts else "–"),
            ("Rehearsals (private, never ranked) / verified",
             "{rehearsals} / {rehearsals_verified}".format(**attempts) if attempts else "–"),
            ("Efficiency against its peers", _against_peers(s, results)),
            ("Memory per node", fmt.bytes_(s.memory_per_node) if s.memory_per_node else "–"),
            ("First seen", fmt.date(s.created_at)),
        ],
        "nav": "list",
    }
    return render(request, "site/system.html", context)


def _against_peers(s: System, results: list[Result]) -> str:
    """The system's best efficiency beside the list's median for its accelerator model at that precision."""
    ranked = [r for r in results if r.rank is not None and r.efficiency is not None and r.rules == "v2"]
    if not ranked or not s.accelerator_count:
        return "–"
    best = max(ranked, key=lambda r: r.score_ops)
    peers = queries.reference_efficiency(best.division, s.accelerator_model)
    ref = next((p for p in peers if p["precision"] == best.precision), None)
    mine = f"{fmt.percent(best.efficiency)} ({best.precision}, result {best.pk})"
    if ref is None or ref["n"] < 2:
        return f"{mine}; no other system with {s.accelerator_model} at {best.precision} on the list yet"
    return (f"{mine}; the median of the {ref['n']} systems with {s.accelerator_model} at {best.precision} in the "
            f"{best.get_division_display().lower()} division is {fmt.percent(ref['median'])} "
            f"(best {fmt.percent(ref['best'])})")


def site(request: HttpRequest, pk: int) -> HttpResponse:
    st = get_object_or_404(Site.objects.prefetch_related("keys"), pk=pk)
    results = list(queries.visible_results().filter(site=st).select_related("site", "system").defer("report")
                   .order_by("-score_ops", "pk"))
    live = Q(results__in=Result.objects.live())
    systems = list(System.objects.filter(site=st).annotate(
        n=Count("results", filter=live),
        best=Max("results__score_ops", filter=live & Q(results__workload=Result.Workload.IMAGE)),
        best_llm=Max("results__score_ops", filter=live & Q(results__workload=Result.Workload.LLM)))
        .order_by("accelerator_model", "nodes"))
    charts_html = {}
    by_date = sorted(results, key=lambda r: (r.published_at or r.verified_at, r.pk))
    for key, workload in (("history", Result.Workload.IMAGE), ("history_llm", Result.Workload.LLM)):
        of = [r for r in by_date if r.workload == workload]  # one chart per list: other FLOP rules, other units
        if of:
            charts_html[key] = charts.site_history(
                ({"date": (r.published_at or r.verified_at).isoformat(), "score": r.score_ops,
                  "regulated": r.regulated_score_ops, "label": f"result {r.pk}", "system_id": r.system_id,
                  "system": fmt.system_label(r.system)} for r in of),
                "chart-site-history" if workload == Result.Workload.IMAGE else "chart-site-history-llm")
    context = {
        "st": st, "country_name": fmt.country(st.country), "table": _results_table(results),
        "systems": [{"s": x, "url": reverse("system-page", args=[x.pk]), "label": fmt.system_label(x), "n": x.n,
                     "best": fmt.ops(x.best) if x.best is not None else "–",
                     "best_llm": fmt.ops(x.best_llm) if x.best_llm is not None else ""} for x in systems],
        "any_llm": any(x.best_llm is not None for x in systems),
        "keys": list(st.keys.all()), "charts": charts_html, "nav": "list",
    }
    return render(request, "site/site.html", context)


# ---- statistics and methodology ------------------------------------------------------------------

@listcache.cached_page("site")
def statistics(request: HttpRequest) -> HttpResponse:
    division = request.GET.get("division", "")
    division = division if division in Division.values else ""
    workload = "llm" if request.GET.get("workload") in queries.WORKLOADS else "image"
    figures = queries.statistics_of(division, workload)
    shares, live, vendor_editions = figures.shares, figures.live, figures.vendor_editions
    timeline = figures.editions + ([live] if live["n"] else [])
    charts_html = {}
    if shares["vendor"]:
        charts_html["vendor"] = charts.shares(shares["vendor"], "accelerator vendor", "chart-vendor")
        charts_html["country"] = charts.shares(shares["country"], "country", "chart-country")
        charts_html["accelerator"] = charts.shares(shares["accelerator"], "accelerator model", "chart-accelerator")
    if timeline:
        charts_html["editions"] = charts.editions(timeline)
    if vendor_editions:
        charts_html["vendor_editions"] = charts.vendor_share_over_editions(vendor_editions)

    def table(rows: list[dict[str, Any]], label=lambda n: n) -> list[dict[str, Any]]:
        n = sum(r["n"] for r in rows) or 1
        total = sum(r["total"] for r in rows) or 1.0
        return [{"name": label(r["name"]), "n": r["n"], "share_n": fmt.percent(r["n"] / n),
                 "total": fmt.ops(r["total"]), "share_total": fmt.percent(r["total"] / total), "top": fmt.ops(r["top"])}
                for r in rows]

    context = {
        "division": division, "divisions": Division.choices, "charts": charts_html, "live": live,
        "workload": workload, "list_name": "AIPerf-LLM list" if workload == "llm" else "AIPerf list",
        "live_total": fmt.ops(live["total"]), "live_top": fmt.ops(live["top"]),
        "efficiency_rows": [{**r, "median": fmt.percent(r["median"]), "best": fmt.percent(r["best"])}
                            for r in (queries.reference_efficiency(division) if workload == "image" else [])],
        "vendor_rows": table(shares["vendor"]),
        "country_rows": table(shares["country"], lambda c: f"{fmt.country(c)} ({c})"),
        "accelerator_rows": table(shares["accelerator"]),
        "edition_rows": [{"name": r["name"], "n": r["n"], "total": fmt.ops(r["total"]), "top": fmt.ops(r["top"]),
                          "url": (reverse("edition", args=[r["name"]]) if r["name"] != "live" else reverse("home"))
                          + ("?workload=llm" if workload == "llm" else "")}
                         for r in timeline],
        "nav": "statistics",
    }
    return render(request, "site/statistics.html", context)


def methodology(request: HttpRequest) -> HttpResponse:
    th = spec_rules.thresholds()
    rows = [{"name": k, "value": fmt.number(v)} for k, v in th.items()]
    context = {
        "rules_version": spec_rules.RULES_VERSION, "spec_version": SPEC_VERSION,
        "runner_version": aiperf_runner.__version__, "verifier_version": VERIFIER_VERSION,
        "versions_known": list(spec_rules.THRESHOLDS), "thresholds": rows, "th": th,
        "flop_rules": scoring.RULES, "default_rules": scoring.DEFAULT_RULES,
        "step_s": scoring.OFFICIAL_STEP_S, "max_points": scoring.MAX_POINTS, "long_run_s": scoring.LONG_RUN_S,
        "accuracy_cap": scoring.ACCURACY_CAP, "v1_train": scoring.V1_TRAIN_IMAGES, "v1_eval": scoring.V1_EVAL_IMAGES,
        "window_pct": f"{th['stability_window']:.0%}", "min_acc_pct": f"{th['min_max_accuracy']:.0%}",
        "min_duration_h": th["min_duration_s"] / 3600, "require_approval": settings.AIPERF_REQUIRE_APPROVAL,
        "official_rules": ranking.official_rules(),
        "llm_rules": LLM_RULES, "llm_presets": list(LLM_PRESETS.values()),
        "llm_official": llmtrust.official_presets(settings.AIPERF_RULES_VERSION or None),
        "nav": "methodology",
    }
    return render(request, "site/methodology.html", context)
