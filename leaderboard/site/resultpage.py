"""A result's page (/results/<id>): its facts, charts, verification report, trust and audit, trials and
downloads (the signed bundle, the recomputed series).

Every figure shown is one the service stored when it verified the bundle (leaderboard/pipeline.py); the page
formats and draws them, it never computes a score.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from aiperf_runner.spec import proof, scoring, spread
from aiperf_runner.spec import rules as spec_rules
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from leaderboard import listcache, standing
from leaderboard.models import (
    EditionEntry,
    Result,
    ResultSeries,
    public_edition_q,
)
from leaderboard.site import changes, charts, queries
from leaderboard.site import format as fmt

LLM_AUDIT_PASSED = "Passed: the weights are the graphs' and reach the logged validation losses"
GROUP_TITLES = {"integrity": "Integrity", "validity": "Validity (official division)", "stability": "Stability",
                "plausibility": "Plausibility"}


def _software_text(stack: Any) -> str:
    if not isinstance(stack, dict) or not stack:
        return "–"
    names = {"torch": "PyTorch", "cuda": "CUDA", "python": "Python", "os": "OS", "runner": "aiperf-runner"}
    return ", ".join(f"{names.get(k, k)} {v}" for k, v in stack.items())


def _tuning_text(knobs: Any) -> str:
    """The run's settings of the closed division's knobs (pipeline.tuning), in words."""
    if not isinstance(knobs, dict) or not knobs:
        return "–"
    names = {"precision": "precision", "data_decoder": "image decoder", "decoded_at_staging": "images decoded at staging",
             "data_workers": "loader workers",
             "channels_last": "channels-last", "torch_compile": "torch.compile", "cuda_graphs": "CUDA graphs"}
    values = {("data_decoder", "device"): "device (JPEGs decoded on the accelerators: nvJPEG on GPUs)"}
    return ", ".join(f"{names.get(k, k)} {'on' if v is True else 'off' if v is False else values.get((k, v), v)}"
                     for k, v in knobs.items())


def _visible_result(pk: int) -> Result:
    return get_object_or_404(queries.visible_results().select_related("site", "system", "submission"), pk=pk)


@listcache.cached_page("site")
def result(request: HttpRequest, pk: int) -> HttpResponse:
    r = _visible_result(pk)
    points = ResultSeries.objects.filter(result=r).values_list("points", flat=True).first() or []
    trials = list(r.trials.order_by("trial"))
    report = r.report or {}
    checks = report.get("checks") or []
    try:
        th = spec_rules.thresholds(r.rules_version)
    except ValueError:
        th = {}
    fraction = th.get("stability_window", 0.5)
    window = scoring.series_window(points, fraction) if points else []
    window_start = window[0]["t"] if window else None
    stability = next((c for c in checks if c.get("name") == "stability.score_cv"), None)
    label = f"steady-state window: last {fraction:.0%} of the run"
    if stability and isinstance(stability.get("measured"), (int, float)):
        label += f" · CV {stability['measured']:.3f} (bound {fmt.number(stability.get('threshold'))})"

    charts_html = {}
    llm = r.workload == Result.Workload.LLM
    if points:
        charts_html["score"] = charts.score_over_time(points, window_start, label)
        if llm:
            charts_html["loss"] = charts.loss_over_time(points)
        else:
            charts_html["accuracy"] = charts.accuracy_over_time(points)
    if any(t.slot is not None and t.started_s is not None for t in trials):
        charts_html["timeline"] = charts.trial_timeline(trials, r.duration_s or (points[-1]["t"] if points else 0))
    if any(t.train_flops_per_image for t in trials):
        charts_html["architectures"] = charts.architecture_flops(trials)

    groups: dict[str, list[dict[str, Any]]] = {}
    for c in checks:
        group = str(c.get("name", "")).split(".", 1)[0]
        groups.setdefault(group, []).append({
            "name": c.get("name"), "threshold": fmt.number(c.get("threshold")),
            "measured": fmt.number(c.get("measured")), "passed": bool(c.get("passed")), "message": c.get("message"),
        })
    report_groups = [{"key": g, "title": GROUP_TITLES.get(g, g.title()), "checks": cs,
                      "failed": sum(not c["passed"] for c in cs)} for g, cs in groups.items()]

    live = r.rank_all is not None  # stored by leaderboard/ranking.py: set on every live result, NULL off the list
    rank = r.rank if live else None
    edition_ranks = list(EditionEntry.objects.filter(public_edition_q(), result=r)
                         .select_related("edition").order_by("-edition__name"))
    s = r.system
    context = {
        "r": r, "system": s, "system_label": fmt.system_label(s), "site": r.site, "live": live, "rank": rank,
        "edition_ranks": edition_ranks, "standing": standing.standing(r), "trust": standing.trust_line(r),
        "charts": charts_html, "report_groups": report_groups, "checks_total": len(checks),
        "checks_failed": sum(not c.get("passed") for c in checks), "trials": trials,
        "trials_html": _trials_html(trials, llm), "llm": llm,
        "failed_names": [c.get("name") for c in checks if not c.get("passed")],
        "preset_problem": standing.preset_problem(r),
        "demo": bool(report.get("demo")),
        "bundle": bool(r.submission.bundle.name), "points": len(points),
        "facts": [
            ("Score", fmt.ops(r.score_ops)), ("Regulated score", fmt.ops(r.regulated_score_ops)),
            *(_llm_facts(r, report) if llm else [("Run-to-run spread of the preset", _spread_text(r)),
                                                  ("Best accuracy", fmt.percent(r.max_accuracy, 2))]),
            ("Efficiency against peak", fmt.percent(r.efficiency) if r.efficiency is not None else "–"),
            ("Peak at the run's precision", fmt.flops(r.peak_flops)),
            ("Division", r.get_division_display()), ("Verification level", fmt.level_label(r.verification_level)),
            ("FLOP rules", r.rules + ("" if r.rules == "v2" else " (listed apart from v2 results)")),
            ("Hardware judged by", (report.get("system") or {}).get("describe") or "–"),
            ("Audit of the weights", _audit_text(r)),
            ("Audit of the work", _work_text(r)),
            ("Review", (r.get_review_display() + (f": {r.review_reason}" if r.review_reason else "")
                        + (f" ({r.reviewed_by}, {fmt.date(r.reviewed_at)})" if r.reviewed_at else ""))
             if r.review else "not needed"),
            ("Duration", fmt.duration(r.duration_s)), ("Precision", r.precision or "–"), ("Preset", r.preset or "–"),
            ("Trials finished", f"{r.trials_finished:,}"), *([] if llm else [("Epochs", f"{r.epochs:,}")]),
        ],
        "versions": [
            ("Run id", r.run_id), ("Rules", f"{r.rules_version} (FLOP rules {report.get('rules_used') or report.get('rules') or '–'})"),
            ("Spec", r.spec_version or "–"), ("Runner", r.runner_version or "–"), ("Verifier", r.verifier_version),
            ("Software (as the run recorded it)", _software_text(report.get("software"))),
            ("Settings (what a site may tune)", _tuning_text(report.get("tuning"))),
            ("Started", fmt.date(r.started_at)), ("Verified", fmt.date(r.verified_at)),
            ("Published", fmt.date(r.published_at)),
        ],
        "history": changes.history(r.pk), "log_head": changes.head_facts(),
        "nav": "list",
    }
    return render(request, "site/result.html", context)


def _llm_facts(r: Result, report: dict[str, Any]) -> list[tuple[str, str]]:
    """What an AIPerf-LLM result says in the place of the image workload's accuracy and spread."""
    loss = "–" if r.best_loss is None else f"{r.best_loss:.4f} nats per byte (accuracy equivalent e^−L = " \
                                          f"{r.max_accuracy:.2%})"
    tokens = report.get("tokens_trained")
    return [("Workload", r.get_workload_display()), ("Best validation loss", loss),
            ("Tokens trained", f"{tokens:,}" if isinstance(tokens, int) else "–"),
            ("Growths used", ", ".join(report.get("morphisms_used") or []) or "none")]


def _spread_text(r: Result) -> str:
    """How much identical runs of this preset move (spec/spread.py): differences smaller than that say little."""
    known = spread.known_spread(r.preset, r.duration_s)
    return known.describe() if known is not None else "not measured for this preset"


def _audit_text(r: Result) -> str:
    """The audit as the result page says it: its state and, per challenged trial, what was re-measured."""
    if not r.audit:
        return "not audited (no challenge: an unwitnessed run)"
    if r.audit == Result.Audit.DEMO:
        return r.get_audit_display()
    passed_llm = r.workload == "llm" and r.audit == Result.Audit.PASSED  # its trials log losses, not accuracies
    parts = [LLM_AUDIT_PASSED if passed_llm else r.get_audit_display()]
    for trial, checks in ((r.audit_report or {}).get("trials") or {}).items():
        accuracy = next((c for c in checks if c["name"] in ("audit.accuracy", "audit.loss")), None)
        failed = [c["name"] for c in checks if not c["passed"]]
        parts.append(f"{trial}: " + ("passed" if not failed else "failed " + ", ".join(failed))
                     + (f" ({accuracy['message'].split(': ', 1)[-1]})" if accuracy else ""))
    if (r.audit_report or {}).get("message"):
        parts.append(r.audit_report["message"])
    return "; ".join(parts)


def _work_text(r: Result) -> str:
    """The re-executed segments and the best checkpoint, as the result page says them."""
    report = r.audit_report or {}
    segments = report.get("segments")
    if r.workload == Result.Workload.LLM:
        return _llm_work_text(r, report)
    if r.audit == Result.Audit.DEMO:
        return "none to re-execute: generated demo data has no committed training states"
    if segments is None:
        return "not asked for (rules before 3.0, or an unwitnessed run)" if r.audit != Result.Audit.PENDING \
            else "waiting for the committed states"
    checks = [c for cs in segments.values() for c in cs]
    failed = [c for c in checks if not c["passed"]]
    parts = [f"{len(checks) - len(failed)} of {len(checks)} segments re-executed to their committed state "
             f"(drawn from {report.get('drawn_from')} kept of {report.get('committed')} committed: a run that "
             f"skipped a quarter of its work is caught by such a draw with probability "
             f"{100 * proof.detection_probability(0.25, len(checks)):.2f} %)"]
    parts += [c["message"] for c in failed]
    parts += [c["message"] for c in report.get("best") or []]
    return "; ".join(parts)


def _llm_work_text(r: Result, report: dict[str, Any]) -> str:
    """The AIPerf-LLM trials re-executed (whole trials, from the start their log binds), as the result page says."""
    reexecuted = report.get("reexecuted")
    if reexecuted is None:
        return ("not asked for (an unwitnessed run, or audited before trials were re-executed)"
                if r.audit != Result.Audit.PENDING else "waiting for the drawn trials' weights and moments")
    checks = [c for cs in reexecuted.values() for c in cs]
    failed = [c for c in checks if not c["passed"]]
    parts = [f"{len(checks) - len(failed)} of {len(checks)} drawn trials re-executed to the weights they claim "
             f"(drawn from {report.get('drawn_from')} of {report.get('finished')} finished trials, the best always, "
             f"the others weighted by their claimed FLOPs)"]
    return "; ".join(parts + [c["message"] for c in failed])


def result_bundle(request: HttpRequest, pk: int) -> FileResponse:
    r = _visible_result(pk)
    bundle = r.submission.bundle
    if not bundle.name or not bundle.storage.exists(bundle.name):
        raise Http404("the bundle of this result is not stored")
    return FileResponse(bundle.open("rb"), as_attachment=True, filename=f"aiperf-{r.run_id}.tar.gz",
                        content_type="application/gzip")


def _trials_html(trials: list[Any], llm: bool = False) -> SafeString:
    """The rows of the trials table (a run has up to thousands of trials); AIPerf-LLM's: the loss."""
    out = []
    for t in trials:
        if llm:
            acc = fmt.loss(t.best_loss)
        else:
            acc = fmt.percent(t.best_accuracy, 2) if t.best_accuracy is not None else "–"
        flop = fmt.flop(t.train_flops_per_image) if t.train_flops_per_image else "–"
        start = f"{t.started_s:,.0f}" if t.started_s is not None else "–"
        end = f"{t.ended_s:,.0f}" if t.ended_s is not None else "–"
        out.append(
            f'<tr><th scope="row">{escape(t.trial)}</th><td>{escape(t.parent or "–")}</td>'
            f'<td>{escape(", ".join(t.morphisms or []) or "seed")}</td>'
            f'<td class="num">{"–" if t.slot is None else t.slot}</td>'
            f'<td class="num">{"–" if t.round is None else t.round}</td><td class="num">{start}</td>'
            f'<td class="num">{end}</td><td class="num">{t.epochs}</td><td class="num">{acc}</td>'
            f'<td class="num">{flop}</td><td>{escape(t.status or "–")}</td></tr>')
    return mark_safe("\n".join(out))


SERIES_FIELDS = ["t", "work", "score", "regulated", "max_accuracy"]
LLM_SERIES_FIELDS = ["t", "score", "regulated", "best_loss"]  # AIPerf-LLM's series: a point per finished trial


def result_series(request: HttpRequest, pk: int, ext: str) -> HttpResponse:
    """The series the service recomputed from the bundle (aiperf_runner.spec), as CSV or JSON."""
    if ext not in ("csv", "json"):
        raise Http404("the series comes as series.csv or series.json")
    r = _visible_result(pk)
    points = ResultSeries.objects.filter(result=r).values_list("points", flat=True).first()
    if points is None:
        raise Http404("no series stored for this result")
    name = f"aiperf-result-{r.pk}-series.{ext}"
    if ext == "json":
        body = {"result": r.pk, "run_id": r.run_id, "rules_version": r.rules_version, "spec_version": r.spec_version,
                "verifier_version": r.verifier_version, "units": {"t": "s since the run started", "work": "FLOP",
                                                                  "score": "OPS", "regulated": "OPS",
                                                                  "max_accuracy": "fraction",
                                                                  "best_loss": "nats per byte (AIPerf-LLM)"},
                "points": points}
        response = HttpResponse(json.dumps(body, indent=1), content_type="application/json")
    else:
        buf = io.StringIO()
        fields = LLM_SERIES_FIELDS if r.workload == Result.Workload.LLM else SERIES_FIELDS
        writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(points)
        response = HttpResponse(buf.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
