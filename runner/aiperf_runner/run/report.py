"""`status` and `report`: what a run did, from its directory (while it runs and after).

Scores, the score series and the checks come from spec/ (`verify`, `scoring`); nothing here
computes a score. What is counted here is bookkeeping: trials, morphisms, hyper-parameter sources,
slot utilisation.
"""

from __future__ import annotations

import html
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aiperf_runner.run.state import RunState, read_run_json
from aiperf_runner.rundir import recorded
from aiperf_runner.rundir.lock import controller_alive
from aiperf_runner.spec.llmrules import is_llm


def run_status(state: RunState, run_dir: Path) -> tuple[str, int | None]:
    """("running" | "finished" | "interrupted" | "starting", controller pid)."""
    pid = controller_alive(run_dir)
    if state.finished:
        return "finished", pid
    if pid is not None:
        return "running", pid
    return ("interrupted" if state.started_at is not None else "starting"), None


def _verify(run_dir: Path, system: dict[str, Any] | None,
            witness_keys: dict[str, bytes] | None) -> tuple[dict[str, Any] | None, str | None]:
    """spec.verify's report of the run, judged against the run's records (rundir/recorded.py), or why there is none."""
    try:
        from aiperf_runner.spec.verify import verify
    except ImportError as exc:
        return None, f"spec.verify not available: {exc}"
    try:
        return verify(run_dir, system=system, witness_keys=witness_keys), None
    except Exception as exc:  # noqa: BLE001 - a report of a broken run still shows what it can
        return None, f"{type(exc).__name__}: {exc}"


def _score_only(run_dir: Path) -> dict[str, Any] | None:
    try:
        from aiperf_runner.spec.scoring import score_run

        series = score_run(run_dir)
    except Exception:  # noqa: BLE001
        return None
    return {"score_ops": series.score, "regulated_score_ops": series.regulated, "max_accuracy": series.max_accuracy,
            "duration_s": series.duration_s, "epochs": series.epochs, "series": series.points}


def summarize(run_dir: str | Path, *, with_verify: bool = True) -> dict[str, Any]:
    """The figures of `report --json` (and of the terminal summary)."""
    run_dir = Path(run_dir)
    run_json = read_run_json(run_dir)
    state = RunState.load(run_dir)
    status, pid = run_status(state, run_dir)
    now = time.time()
    end = state.finished_at if state.finished else (now if status == "running" else state.last_t)
    records = (recorded.registration(run_json), recorded.witness_keys(run_dir)) if with_verify else (None, None)
    verified, verify_error = _verify(run_dir, *records) if with_verify else (None, None)
    scored = verified or _score_only(run_dir) or {}
    retries = sum(1 for tr in state.trials.values() for a in tr.attempts if a.outcome == "failed")
    out: dict[str, Any] = {
        "run_id": run_json.get("run_id"),
        "preset": run_json.get("preset"),
        "rules": run_json.get("rules"),
        "precision": run_json.get("precision"),
        "status": status,
        "controller_pid": pid,
        "finish_reason": state.finish_reason,
        "slots": state.slots,
        "duration_s": scored.get("duration_s"),
        "planned_duration_s": (run_json.get("config") or {}).get("duration_s"),
        "resumed": len(state.resumed),
        "trials_proposed": len(state.trials),
        "trials_finished": state.count("finished"),
        "trials_failed": state.count("failed"),
        "trials_cancelled": state.count("cancelled"),
        "trials_running": len(state.running()),
        "failed_attempts": retries,
        "epochs": scored.get("epochs", state.epoch_lines),
        "morphisms": state.morphism_counts(),
        "hparam_sources": state.hparam_source_counts(),
        "hparam_sources_by_round": _sources_by_round(state),
        "max_accuracy": scored.get("max_accuracy", state.best_accuracy()),
        "slot_utilisation": state.slot_utilisation(end),
        "score_ops": scored.get("score_ops"),
        "regulated_score_ops": scored.get("regulated_score_ops"),
    }
    if is_llm(run_json):
        out.update(llm_figures(run_dir, run_json, verified))
    if (run_json.get("config") or {}).get("rehearsal"):
        out["rehearsal"] = True
    if verified is not None:
        out.update({k: verified.get(k) for k in ("integrity_ok", "valid", "stable", "plausible", "division")})
        out["checks_failed"] = [c.get("name") for c in verified.get("checks", []) if not c.get("passed")]
        out["judged_against"] = recorded.describe(*records)
    elif verify_error:
        out["verify_error"] = verify_error
    out["_series"] = scored.get("series") or []
    out["_checks"] = (verified or {}).get("checks") or []
    out["_state"] = state
    out["_run_json"] = run_json
    return out


def llm_figures(run_dir: Path, run_json: dict[str, Any], verified: dict[str, Any] | None = None) -> dict[str, Any]:
    """What an AIPerf-LLM run reports instead of epochs, network morphisms and accuracy: tokens trained, FLOPs and
    the best validation loss as the rules count them (`verified`'s, or spec/llmverify.py `counted` of the log so
    far), growths by kind (every proposal's) and each finished trial's loss; its accuracy equivalent
    (spec/llmrules.py `loss_factor`) stays as `max_accuracy`, the regulated score's factor."""
    from aiperf_runner.spec.eventlog import iter_events
    from aiperf_runner.spec.llmgrowth import GROWTH_KINDS
    from aiperf_runner.spec.llmverify import counted

    events = [e.data for e in iter_events(run_dir / "events.jsonl", allow_partial_tail=True)]
    rules = verified if verified and "tokens_trained" in verified else counted(run_json, events) or {}
    proposed = {e.get("trial"): e for e in events if e.get("type") == "trial_proposed"}
    growths = Counter(dict.fromkeys(GROWTH_KINDS, 0))
    growths.update(str(g.get("kind")) for e in proposed.values() for g in e.get("growths") or [])
    trials = []
    for e in events:
        if e.get("type") != "trial_finished" or e.get("val_loss") is None:
            continue
        p = proposed.get(e.get("trial"), {})
        trials.append({"trial": str(e.get("trial")), "t": float(e["t"]), "loss": float(e["val_loss"]),
                       "round": p.get("round"), "growths": [str(g.get("kind")) for g in p.get("growths") or []],
                       "parent": p.get("parent"), "hparam_source": p.get("hparam_source"), "hparams": p.get("hparams")})
    return {"workload": "llm", "morphisms": dict(growths), "epochs": None, "tokens_trained": rules.get("tokens_trained"),
            "best_loss": rules.get("best_loss"), "flops": rules.get("flops"), "_llm_trials": trials}


def _sources_by_round(state: RunState) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tr in state.trials.values():
        row = out.setdefault(str(tr.round), {})
        row[tr.hparam_source] = row.get(tr.hparam_source, 0) + 1
    return out


def public(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without its private (underscored) parts: what `report --json` prints."""
    return {k: v for k, v in summary.items() if not k.startswith("_")}


# ---- terminal --------------------------------------------------------------------------------------


def print_summary(summary: dict[str, Any], console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from aiperf_runner.run.progress import fmt_duration, fmt_ops

    console = console or Console()
    s = summary
    table = Table(title=f"AIPerf run {s['run_id']} ({s['preset']}, {s['precision']}, rules {s['rules']})",
                  show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    status = s["status"] + (f" ({s['finish_reason']})" if s["finish_reason"] else "")
    if s["status"] == "running":
        status += f", controller pid {s['controller_pid']}"
    if s["status"] == "interrupted":
        status += " — continue it with `aiperf-runner run --resume RUN_DIR`"
    table.add_row("status", status)
    table.add_row("duration", f"{fmt_duration(s['duration_s'])} of {fmt_duration(s['planned_duration_s'])}"
                  + (f", resumed {s['resumed']}x" if s["resumed"] else ""))
    table.add_row("trials", f"{s['trials_finished']} finished, {s['trials_failed']} failed, "
                            f"{s['trials_cancelled']} cancelled, {s['trials_running']} running "
                            f"({s['trials_proposed']} proposed, {s['failed_attempts']} failed attempts)")
    for label, value in _work_rows(s):
        table.add_row(label, value)
    table.add_row("hyper-parameters", ", ".join(f"{k} {v}" for k, v in s["hparam_sources"].items()))
    util = s["slot_utilisation"]
    table.add_row("slot utilisation", "-" if util is None else f"{util:.1%} of {s['slots']} slots")
    table.add_row(*_quality_row(s))
    table.add_row("score", fmt_ops(s["score_ops"]))
    table.add_row("regulated score", fmt_ops(s["regulated_score_ops"]))
    if "integrity_ok" in s:
        checks = "all checks passed" if not s["checks_failed"] else f"failed: {', '.join(s['checks_failed'])}"
        table.add_row("verification", f"integrity {'ok' if s['integrity_ok'] else 'BROKEN'}; "
                                      f"division {s.get('division')}; {checks}")
        if s.get("judged_against"):
            table.add_row("", s["judged_against"])
    elif s.get("verify_error"):
        table.add_row("verification", f"not available: {s['verify_error']}")
    if s.get("rehearsal"):
        table.add_row("rehearsal", "yes: never ranked; `aiperf-runner submit --rehearsal` has it verified for this "
                                   "site only")
    console.print(table)


def _work_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """What the trials trained and how they grew: epochs and morphisms, or an LLM run's tokens and growths."""
    grown = ", ".join(f"{k} {v}" for k, v in s["morphisms"].items())
    if s.get("workload") == "llm":
        tokens = s.get("tokens_trained")
        return [("tokens trained", "-" if tokens is None else f"{tokens:,}"), ("growths", grown)]
    return [("epochs", str(s["epochs"])), ("morphisms", grown)]


def _quality_row(s: dict[str, Any]) -> tuple[str, str]:
    from aiperf_runner.run.progress import fmt_acc

    if s.get("workload") == "llm":
        loss = s.get("best_loss")
        return "best validation loss", "-" if loss is None else f"{loss:.4f} nats"
    return "max accuracy", fmt_acc(s["max_accuracy"])


# ---- HTML ------------------------------------------------------------------------------------------


def _timeline(state: RunState, t0: float, end: float) -> Any:
    import plotly.graph_objects as go

    colours = {"finished": "#2a9d8f", "failed": "#e76f51", "cancelled": "#8d99ae", None: "#e9c46a"}
    fig = go.Figure()
    for outcome in ("finished", "failed", "cancelled", None):
        xs, bases, ys, texts = [], [], [], []
        for tr in state.trials.values():
            for att in tr.attempts:
                if att.outcome != outcome:
                    continue
                stop = att.ended if att.ended is not None else end
                bases.append((att.started - t0) / 60)
                xs.append(max(stop - att.started, 0) / 60)
                ys.append(f"slot {att.slot}")
                acc = tr.best_accuracy if outcome == "finished" else tr.epoch_best
                texts.append(f"{tr.trial} attempt {att.attempt}<br>{outcome or 'running'}"
                             f"<br>round {tr.round}, budget {tr.epoch_budget} epochs"
                             f"<br>morphisms: {', '.join(tr.morphisms) or 'seed'}"
                             f"<br>hparams: {tr.hparam_source}"
                             + (f"<br>best accuracy {acc:.4f}" if acc is not None else "")
                             + (f"<br>error: {html.escape((att.error or '')[:200])}" if att.error else ""))
        if xs:
            fig.add_bar(x=xs, base=bases, y=ys, orientation="h", name=outcome or "running",
                        marker_color=colours[outcome], hovertext=texts, hoverinfo="text",
                        marker_line_width=1, marker_line_color="white")
    fig.update_layout(title="Trials per slot", xaxis_title="minutes since run start", barmode="overlay",
                      height=180 + 40 * max(state.slots or 0, 1), yaxis={"categoryorder": "category descending"})
    return fig


def _score_figure(series: list[dict[str, Any]]) -> Any:
    import plotly.graph_objects as go

    minutes = [p["t"] / 60 for p in series]
    score = go.Figure()
    score.add_scatter(x=minutes, y=[p["score"] for p in series], name="score (OPS)", mode="lines")
    score.add_scatter(x=minutes, y=[p["regulated"] for p in series], name="regulated score (OPS)", mode="lines",
                      yaxis="y2")
    score.update_layout(title="Score and regulated score", xaxis_title="minutes since t0",
                        yaxis={"title": "score (OPS)"},
                        yaxis2={"title": "regulated score (OPS)", "overlaying": "y", "side": "right"})
    return score


def _accuracy_figure(state: RunState, series: list[dict[str, Any]], t0: float) -> Any:
    """The best accuracy over time, and every epoch's accuracy as a point."""
    import plotly.graph_objects as go

    acc = go.Figure()
    acc.add_scatter(x=[p["t"] / 60 for p in series], y=[p["max_accuracy"] for p in series], name="best accuracy",
                    mode="lines", line_shape="hv")
    epochs = list(state.epoch_records())
    acc.add_scatter(x=[(e["ended_at"] - t0) / 60 for e in epochs],
                    y=[e.get("val_accuracy") for e in epochs], mode="markers", name="epoch accuracy",
                    marker={"size": 5, "opacity": 0.5},
                    hovertext=[f"{e['trial']} epoch {e['epoch']}" for e in epochs])
    acc.update_layout(title="Best validation accuracy", xaxis_title="minutes since run start",
                      yaxis={"title": "accuracy", "range": [0, 1]})
    return acc


def _loss_figure(series: list[dict[str, Any]], trials: list[dict[str, Any]], t0: float) -> Any:
    """An AIPerf-LLM run's best validation loss over time, and every finished trial's loss as a point."""
    import plotly.graph_objects as go

    loss = go.Figure()
    loss.add_scatter(x=[p["t"] / 60 for p in series], y=[p.get("best_loss") for p in series], name="best loss",
                     mode="lines", line_shape="hv")
    loss.add_scatter(x=[(t["t"] - t0) / 60 for t in trials], y=[t["loss"] for t in trials],
                     mode="markers", name="trial loss", marker={"size": 5, "opacity": 0.5},
                     hovertext=[t["trial"] for t in trials])
    loss.update_layout(title="Best validation loss", xaxis_title="minutes since run start",
                       yaxis={"title": "loss (nats)"})
    return loss


def _figures_html(summary: dict[str, Any]) -> list[str]:
    """The three charts as HTML fragments (plotly.js inlined in the first)."""
    state: RunState = summary["_state"]
    series = summary["_series"]
    t0 = state.started_at or 0.0
    end = state.finished_at or state.last_t or t0
    quality = (_loss_figure(series, summary.get("_llm_trials") or [], t0) if summary.get("workload") == "llm"
               else _accuracy_figure(state, series, t0))
    figures = [_score_figure(series), quality, _timeline(state, t0, end)]
    return [fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False})
            for i, fig in enumerate(figures)]


def _summary_html(s: dict[str, Any]) -> str:
    from aiperf_runner.run.progress import fmt_duration, fmt_ops

    rows = [
        ("status", s["status"] + (f" ({s['finish_reason']})" if s["finish_reason"] else "")),
        ("duration", fmt_duration(s["duration_s"])),
        ("slots", str(s["slots"])),
        ("slot utilisation", "-" if s["slot_utilisation"] is None else f"{s['slot_utilisation']:.1%}"),
        ("trials", f"{s['trials_finished']} finished, {s['trials_failed']} failed, {s['trials_cancelled']} cancelled"),
        *_work_rows(s),
        ("hyper-parameter sources", ", ".join(f"{k} {v}" for k, v in s["hparam_sources"].items())),
        _quality_row(s),
        ("score", fmt_ops(s["score_ops"])),
        ("regulated score", fmt_ops(s["regulated_score_ops"])),
    ]
    return "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)


def _checks_html(s: dict[str, Any]) -> str:
    """The verification: a table of the checks, or why there is none."""
    rows = "".join(
        f"<tr class='{'ok' if c.get('passed') else 'bad'}'><td>{html.escape(str(c.get('name')))}</td>"
        f"<td>{html.escape(str(c.get('threshold')))}</td><td>{html.escape(str(c.get('measured')))}</td>"
        f"<td>{'pass' if c.get('passed') else 'FAIL'}</td><td>{html.escape(str(c.get('message') or ''))}</td></tr>"
        for c in s["_checks"])
    if not rows:
        return "<p>" + html.escape(s.get("verify_error") or "no verification report") + "</p>"
    return "<table><tr><th>check</th><th>threshold</th><th>measured</th><th></th><th></th></tr>" + rows + "</table>"


def _best_trials_table(s: dict[str, Any]) -> str:
    """The 15 best trials: of the best accuracy, or of an AIPerf-LLM run the lowest validation loss."""
    if s.get("workload") != "llm":
        return ("<table><tr><th>trial</th><th>accuracy</th><th>round</th><th>epochs</th><th>morphisms</th>"
                "<th>parent</th><th>hparams</th><th>values</th></tr>" + _best_trials_html(s["_state"]) + "</table>")
    best = sorted(s.get("_llm_trials") or [], key=lambda t: t["loss"])[:15]
    rows = "".join(
        f"<tr><td>{html.escape(t['trial'])}</td><td>{t['loss']:.4f}</td><td>{html.escape(str(t['round']))}</td>"
        f"<td>{html.escape(', '.join(t['growths']) or 'seed')}</td><td>{html.escape(t['parent'] or '-')}</td>"
        f"<td>{html.escape(str(t['hparam_source']))}</td>"
        f"<td><code>{html.escape(json.dumps(t['hparams'], sort_keys=True))}</code></td></tr>" for t in best)
    return ("<table><tr><th>trial</th><th>validation loss</th><th>round</th><th>growths</th><th>parent</th>"
            "<th>hparams</th><th>values</th></tr>" + rows + "</table>")


def _best_trials_html(state: RunState) -> str:
    """The 15 trials of the best accuracy, one row each."""
    best = sorted((tr for tr in state.trials.values() if tr.best_accuracy is not None),
                  key=lambda tr: -float(tr.best_accuracy or 0))[:15]
    return "".join(
        f"<tr><td>{tr.trial}</td><td>{tr.best_accuracy:.4f}</td><td>{tr.round}</td><td>{tr.epochs_counted}</td>"
        f"<td>{html.escape(', '.join(tr.morphisms) or 'seed')}</td><td>{html.escape(tr.parent or '-')}</td>"
        f"<td>{html.escape(tr.hparam_source)}</td><td><code>{html.escape(json.dumps(tr.hparams, sort_keys=True))}"
        f"</code></td></tr>" for tr in best)


def _system_line(run_json: dict[str, Any]) -> str:
    system = run_json.get("system") or {}
    return (f"{system.get('accelerator_count') or 0} x {system.get('accelerator_model')}, "
            f"{system.get('cpu_cores')} cores {system.get('cpu_model')}, torch {system.get('torch')}")


def write_html(summary: dict[str, Any], path: str | Path) -> Path:
    """A self-contained HTML report (plotly.js inlined once)."""
    s = summary
    parts = _figures_html(s)
    run_id = html.escape(str(s['run_id']))
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>AIPerf run {run_id}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ text-align: left; padding: 0.25em 0.8em; border-bottom: 1px solid #ddd; vertical-align: top; }}
tr.bad td {{ color: #b00020; }} code {{ font-size: 0.85em; }}
</style></head><body>
<h1>AIPerf run <code>{run_id}</code></h1>
<p>Preset <b>{html.escape(str(s['preset']))}</b>, precision {html.escape(str(s['precision']))},
rules {html.escape(str(s['rules']))}; {html.escape(_system_line(s["_run_json"]))}.</p>
<table>{_summary_html(s)}</table>
{parts[0]}
{parts[1]}
{parts[2]}
<h2>Best trials</h2>
{_best_trials_table(s)}
<h2>Verification</h2>
{_checks_html(s)}
</body></html>
"""
    path = Path(path)
    path.write_text(doc, encoding="utf-8")
    return path
