"""plotly figures of the pages, as HTML fragments: a <div> with the figure in its data attributes;
plotly.js and static/site/charts.js, served from the project's static files (templates/site/_plotly.html),
draw them.

Builders take stored figures (a result's series and trials as the service's verification computed
them with `aiperf_runner.spec`) and only draw them: nothing here computes a score. Figures are
plain plotly dicts encoded with `plotly.io.to_json(validate=False)`, which is fast enough to build
on every request (about a millisecond each).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils.html import format_html
from django.utils.safestring import SafeString

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
BLUE, VERMILLION, GREEN, ORANGE, PURPLE, SKY, YELLOW, BLACK, GREY = (
    "#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#F0E442", "#000000", "#767676")
PALETTE = [BLUE, VERMILLION, GREEN, ORANGE, PURPLE, SKY, BLACK, GREY]
VENDOR_COLOURS = {"NVIDIA": GREEN, "AMD": VERMILLION, "Huawei": BLUE, "Intel": SKY, "CPU": GREY}
STATUS_COLOURS = {"finished": BLUE, "failed": VERMILLION, "cancelled": GREY, "running": ORANGE,
                  "proposed": SKY}

CONFIG = {"displaylogo": False, "responsive": True,
          "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"]}


def _axis(**extra: Any) -> dict[str, Any]:
    return {"gridcolor": "#e3e3e3", "linecolor": "#6b6b6b", "zeroline": False, "automargin": True,
            "title": {"standoff": 8}, **extra}


def _layout(**extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "margin": {"l": 64, "r": 24, "t": 16, "b": 48},
        "font": {"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "size": 13,
                 "color": "#1b1b1b"},
        "paper_bgcolor": "#ffffff", "plot_bgcolor": "#ffffff",
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0},
        "hoverlabel": {"font": {"size": 13}},
        "xaxis": _axis(), "yaxis": _axis(),
    }
    for key, value in extra.items():
        if key in ("xaxis", "yaxis") and isinstance(value, dict):
            layout[key] = {**layout[key], **value, "title": {**layout[key]["title"], **value.get("title", {})}}
        else:
            layout[key] = value
    return layout


def render(data: list[dict[str, Any]], layout: dict[str, Any], div_id: str, height: int = 360) -> SafeString:
    """One figure as an empty <div> whose data attributes carry it; static/site/charts.js draws it.

    No inline script and no style attribute: the pages pass a Content-Security-Policy of
    `script-src 'self'; style-src 'self'` (server/settings.py). The figure is plotly JSON (the same
    encoder as `plotly.io.to_html`), HTML-escaped into the attribute.
    """
    import plotly.io as pio

    figure = pio.to_json({"data": data, "layout": layout}, validate=False)
    return format_html('<div id="{}" class="aiperf-chart" data-height="{}" data-figure="{}" data-config="{}"></div>',
                       div_id, int(height), figure, json.dumps(CONFIG))


def time_unit(duration_s: float) -> tuple[float, str]:
    """Divisor and name of the unit the time axis of a run is drawn in."""
    if duration_s >= 2 * 3600:
        return 3600.0, "h"
    if duration_s >= 120:
        return 60.0, "min"
    return 1.0, "s"


# ---- result page -----------------------------------------------------------------------------------

def score_over_time(points: Sequence[dict[str, float]], window_start_s: float | None, window_label: str,
                    div_id: str = "chart-score") -> SafeString:
    """Score and regulated score over the run, the steady-state window of the stability check shaded."""
    duration = points[-1]["t"] if points else 0.0
    div, unit = time_unit(duration)
    x = [p["t"] / div for p in points]
    data = [
        {"type": "scatter", "mode": "lines", "name": "Score", "x": x, "y": [p["score"] for p in points],
         "line": {"color": BLUE, "width": 2.5}, "hovertemplate": "%{y:.4s}OPS<extra>score</extra>"},
        {"type": "scatter", "mode": "lines", "name": "Regulated score", "x": x,
         "y": [p["regulated"] for p in points], "line": {"color": VERMILLION, "width": 2, "dash": "dash"},
         "hovertemplate": "%{y:.4s}OPS<extra>regulated score</extra>"},
    ]
    shapes, annotations = [], []
    if window_start_s is not None and points:
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": window_start_s / div, "x1": duration / div,
                       "y0": 0, "y1": 1, "fillcolor": "rgba(0, 158, 115, 0.12)", "line": {"width": 0},
                       "layer": "below"})
        annotations.append({"xref": "x", "yref": "paper", "x": window_start_s / div, "y": 1, "xanchor": "left",
                            "yanchor": "top", "text": window_label, "showarrow": False,
                            "font": {"size": 12, "color": "#00573f"}})
    layout = _layout(xaxis={"title": {"text": f"time since the run started ({unit})"}},
                     yaxis={"title": {"text": "OPS"}, "tickformat": "~s", "rangemode": "tozero"},
                     shapes=shapes, annotations=annotations, hovermode="x unified")
    return render(data, layout, div_id)


def accuracy_over_time(points: Sequence[dict[str, float]], div_id: str = "chart-accuracy") -> SafeString:
    return _best_over_time(points, "max_accuracy", "Best validation accuracy", "%{y:.2%}<extra>best accuracy</extra>",
                           {"title": {"text": "best validation accuracy"}, "tickformat": ".0%", "range": [0, 1]}, div_id)


def loss_over_time(points: Sequence[dict[str, float]], div_id: str = "chart-loss") -> SafeString:
    """AIPerf-LLM: the best validation loss so far (nats per byte), the language models' counterpart of accuracy."""
    return _best_over_time(points, "best_loss", "Best validation loss", "%{y:.4f} nats<extra>best loss</extra>",
                           {"title": {"text": "best validation loss (nats per byte)"}}, div_id)


def _best_over_time(points: Sequence[dict[str, float]], key: str, name: str, hover: str, yaxis: dict[str, Any],
                    div_id: str) -> SafeString:
    duration = points[-1]["t"] if points else 0.0
    div, unit = time_unit(duration)
    data = [{"type": "scatter", "mode": "lines", "name": name, "x": [p["t"] / div for p in points],
             "y": [p[key] for p in points], "line": {"color": GREEN, "width": 2.5, "shape": "hv"},
             "hovertemplate": hover}]
    layout = _layout(xaxis={"title": {"text": f"time since the run started ({unit})"}}, yaxis=yaxis,
                     hovermode="x unified", showlegend=False)
    return render(data, layout, div_id, height=300)


def _quality(t: Any) -> str:
    """A trial's result as the hover text says it: its loss (AIPerf-LLM) or its best accuracy."""
    if getattr(t, "best_loss", None) is not None:
        return f"loss {t.best_loss:.4f} nats"
    return "best accuracy " + ("–" if t.best_accuracy is None else f"{t.best_accuracy:.2%}")


def trial_timeline(trials: Sequence[Any], duration_s: float, div_id: str = "chart-timeline") -> SafeString:
    """One bar per trial on its slot, from its start to its end, coloured by how it ended."""
    div, unit = time_unit(duration_s)
    by_status: dict[str, dict[str, list[Any]]] = {}
    slots = sorted({t.slot for t in trials if t.slot is not None})
    for t in trials:
        if t.slot is None or t.started_s is None:
            continue
        end = t.ended_s if t.ended_s is not None else duration_s
        status = t.status or "finished"
        d = by_status.setdefault(status, {"x": [], "base": [], "y": [], "text": []})
        d["base"].append(t.started_s / div)
        d["x"].append(max(end - t.started_s, 0.0) / div)
        d["y"].append(f"slot {t.slot}")
        d["text"].append(f"{t.trial} · round {t.round if t.round is not None else '–'} · {t.epochs} epochs · "
                         f"{_quality(t)}")
    data = []
    for status in sorted(by_status, key=lambda s: list(STATUS_COLOURS).index(s) if s in STATUS_COLOURS else 99):
        d = by_status[status]
        data.append({"type": "bar", "orientation": "h", "name": status, "x": d["x"], "base": d["base"],
                     "y": d["y"], "text": d["text"], "textposition": "none",
                     "marker": {"color": STATUS_COLOURS.get(status, PURPLE), "line": {"color": "#ffffff", "width": 1}},
                     "hovertemplate": "%{text}<br>%{base:.2f} to %{x:.2f} " + unit + " long<extra>" + status
                                      + "</extra>"})
    height = max(220, min(900, 60 + 22 * len(slots)))
    layout = _layout(barmode="overlay", bargap=0.25,
                     xaxis={"title": {"text": f"time since the run started ({unit})"}, "range": [0, duration_s / div]},
                     yaxis={"title": {"text": "slot"}, "type": "category", "autorange": "reversed",
                            "categoryorder": "array", "categoryarray": [f"slot {s}" for s in slots]})
    return render(data, layout, div_id, height=height)


def architecture_flops(trials: Sequence[Any], div_id: str = "chart-architectures") -> SafeString:
    """Training FLOPs per image of every trained architecture, in proposal order, coloured by accuracy
    (AIPerf-LLM: per token, coloured by loss, the lower the brighter)."""
    rows = [t for t in trials if t.train_flops_per_image]
    if any(getattr(t, "best_loss", None) is not None for t in rows):
        losses = [t.best_loss for t in rows if t.best_loss is not None]
        quality = [t.best_loss for t in rows]
        marker = {"color": [q if q is not None else max(losses) for q in quality], "reversescale": True,
                  "colorbar": {"title": {"text": "loss"}, "thickness": 12}}
        unit, hover = "token", "loss %{customdata:.4f} nats"
    else:
        quality = [t.best_accuracy for t in rows]
        marker = {"color": [q or 0 for q in quality], "cmin": min((q or 0 for q in quality), default=0),
                  "cmax": max((q or 0 for q in quality), default=1),
                  "colorbar": {"title": {"text": "best acc."}, "tickformat": ".0%", "thickness": 12}}
        unit, hover = "image", "best accuracy %{customdata:.2%}"
    data = [{
        "type": "scatter", "mode": "markers", "name": "training (forward + backward)",
        "x": [t.trial for t in rows], "y": [t.train_flops_per_image for t in rows],
        "text": [f"{t.trial}{' ← ' + t.parent if t.parent else ''} {'+'.join(t.morphisms or []) or 'seed'}"
                 for t in rows],
        "customdata": quality,
        "marker": {"size": 10, "colorscale": "Viridis", "line": {"color": "#333333", "width": 0.5}, **marker},
        "hovertemplate": f"%{{text}}<br>%{{y:.4s}}FLOP/{unit}<br>{hover}<extra></extra>",
    }]
    layout = _layout(xaxis={"title": {"text": "trial (proposal order)"}, "type": "category",
                            "showticklabels": len(rows) <= 40},
                     yaxis={"title": {"text": f"training FLOP per {unit}"}, "tickformat": "~s"},
                     showlegend=False)
    return render(data, layout, div_id, height=340)


# ---- system and site pages ---------------------------------------------------------------------------

def score_history(rows: Iterable[dict[str, Any]], div_id: str = "chart-history") -> SafeString:
    """Score and regulated score of results against their date."""
    rows = list(rows)
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": "Score", "x": [r["date"] for r in rows],
         "y": [r["score"] for r in rows], "text": [r["label"] for r in rows], "marker": {"color": BLUE, "size": 9},
         "line": {"color": BLUE}, "hovertemplate": "%{text}<br>%{y:.4s}OPS<extra>score</extra>"},
        {"type": "scatter", "mode": "lines+markers", "name": "Regulated score", "x": [r["date"] for r in rows],
         "y": [r["regulated"] for r in rows], "text": [r["label"] for r in rows],
         "marker": {"color": VERMILLION, "size": 8, "symbol": "diamond"}, "line": {"color": VERMILLION, "dash": "dash"},
         "hovertemplate": "%{text}<br>%{y:.4s}OPS<extra>regulated score</extra>"},
    ]
    layout = _layout(xaxis={"title": {"text": "date"}, "type": "date", **_date_range(r["date"] for r in rows)},
                     yaxis={"title": {"text": "OPS"}, "tickformat": "~s", "rangemode": "tozero"})
    return render(data, layout, div_id, height=320)


def site_history(rows: Iterable[dict[str, Any]], div_id: str = "chart-site-history") -> SafeString:
    """A site's results against their date, one line per system (`rows[].system_id`, named `rows[].system`):
    the scores of different machines are not one series, and a line joining them would read as one machine's
    progress."""
    rows = list(rows)
    systems: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        systems.setdefault(r["system_id"], []).append(r)
    data = [{"type": "scatter", "mode": "lines+markers", "name": of[0]["system"], "x": [r["date"] for r in of],
             "y": [r["score"] for r in of], "text": [r["label"] for r in of], "customdata": [r["regulated"] for r in of],
             "marker": {"color": PALETTE[i % len(PALETTE)], "size": 9}, "line": {"color": PALETTE[i % len(PALETTE)]},
             "hovertemplate": "%{text}<br>%{y:.4s}OPS (regulated %{customdata:.4s}OPS)<extra>%{fullData.name}</extra>"}
            for i, of in enumerate(systems.values())]
    layout = _layout(xaxis={"title": {"text": "date"}, "type": "date", **_date_range(r["date"] for r in rows)},
                     yaxis={"title": {"text": "score (OPS)"}, "tickformat": "~s", "rangemode": "tozero"},
                     showlegend=True)
    return render(data, layout, div_id, height=340)


def _date_range(dates: Iterable[str], min_span: timedelta = timedelta(days=30)) -> dict[str, Any]:
    """An x range of at least `min_span` around ISO dates that lie close together (one result
    would otherwise get an axis of milliseconds), with day ticks; nothing when they spread wider."""
    parsed = [datetime.fromisoformat(d) for d in dates]
    if not parsed or max(parsed) - min(parsed) >= min_span:
        return {}
    middle = min(parsed) + (max(parsed) - min(parsed)) / 2
    return {"range": [(middle - min_span / 2).isoformat(), (middle + min_span / 2).isoformat()],
            "tickformat": "%b %d, %Y"}


def scaling(points: Sequence[dict[str, Any]], system_id: int, div_id: str = "chart-scaling") -> SafeString:
    """Score against node count, with the line of perfect linear scaling from the smallest node count.

    `points`: {nodes, score, system_id, label}. The reference is the best score per node at the
    smallest node count measured; the line is that figure times the node count.
    """
    here = [p for p in points if p["system_id"] == system_id]
    others = [p for p in points if p["system_id"] != system_id]
    data = []
    if others:
        data.append({"type": "scatter", "mode": "markers", "name": "the site's other systems with this accelerator",
                     "x": [p["nodes"] for p in others], "y": [p["score"] for p in others],
                     "text": [p["label"] for p in others],
                     "marker": {"color": BLUE, "size": 9, "symbol": "circle-open", "line": {"width": 2}},
                     "hovertemplate": "%{text}<br>%{x} nodes: %{y:.4s}OPS<extra></extra>"})
    data.append({"type": "scatter", "mode": "markers", "name": "this system", "x": [p["nodes"] for p in here],
                 "y": [p["score"] for p in here], "text": [p["label"] for p in here],
                 "marker": {"color": VERMILLION, "size": 12, "symbol": "diamond", "line": {"color": BLACK, "width": 1}},
                 "hovertemplate": "%{text}<br>%{x} nodes: %{y:.4s}OPS<extra></extra>"})
    log = False
    if points:
        n_min = min(p["nodes"] for p in points)
        n_max = max(p["nodes"] for p in points)
        per_node = max(p["score"] for p in points if p["nodes"] == n_min) / max(n_min, 1)
        log = n_max / max(n_min, 1) > 8
        xs = [n_min, n_max] if n_max > n_min else [0, n_max]
        if log:
            xs = [n_min, n_max]
        data.append({"type": "scatter", "mode": "lines", "name": "linear scaling", "x": xs,
                     "y": [per_node * n for n in xs], "line": {"color": GREY, "dash": "dot", "width": 2},
                     "hovertemplate": "linear: %{y:.4s}OPS at %{x} nodes<extra></extra>"})
    nodes = sorted({p["nodes"] for p in points})
    xaxis: dict[str, Any] = {"title": {"text": "nodes"}}
    yaxis: dict[str, Any] = {"title": {"text": "score (OPS)"}, "tickformat": "~s"}
    if log:
        xaxis |= {"type": "log", "tickvals": nodes, "ticktext": [str(n) for n in nodes]}
        yaxis |= {"type": "log", "dtick": 1}
    else:
        xaxis |= {"rangemode": "tozero"}
        yaxis |= {"rangemode": "tozero"}
        if len(nodes) <= 12:
            xaxis |= {"tickvals": [0, *nodes] if nodes and nodes[0] > 0 else nodes}
    layout = _layout(xaxis=xaxis, yaxis=yaxis)
    return render(data, layout, div_id, height=360)


# ---- statistics ------------------------------------------------------------------------------------

def shares(rows: Sequence[dict[str, Any]], what: str, div_id: str, limit: int = 15) -> SafeString:
    """Share of list entries and of the list's total score, per vendor / country / accelerator."""
    rows = list(rows)[:limit]
    entries = sum(r["n"] for r in rows) or 1
    total = sum(r["total"] for r in rows) or 1.0
    names = [r["name"] for r in rows]
    data = [
        {"type": "bar", "orientation": "h", "name": "share of entries", "y": names,
         "x": [r["n"] / entries for r in rows], "marker": {"color": BLUE},
         "hovertemplate": "%{y}: %{x:.1%} of the entries<extra></extra>"},
        {"type": "bar", "orientation": "h", "name": "share of the total score", "y": names,
         "x": [r["total"] / total for r in rows], "marker": {"color": ORANGE},
         "hovertemplate": "%{y}: %{x:.1%} of the total score<extra></extra>"},
    ]
    layout = _layout(barmode="group", xaxis={"title": {"text": f"share by {what}"}, "tickformat": ".0%"},
                     yaxis={"autorange": "reversed", "type": "category"})
    return render(data, layout, div_id, height=max(240, 80 + 40 * len(rows)))


def editions(rows: Sequence[dict[str, Any]], div_id: str = "chart-editions") -> SafeString:
    """Top and total score of each edition (and of the live list, last)."""
    names = [r["name"] for r in rows]
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": "total score of the list", "x": names,
         "y": [r["total"] for r in rows], "marker": {"color": BLUE, "size": 9}, "line": {"color": BLUE},
         "hovertemplate": "%{x}: %{y:.4s}OPS in all<extra></extra>"},
        {"type": "scatter", "mode": "lines+markers", "name": "top score", "x": names,
         "y": [r["top"] for r in rows], "marker": {"color": VERMILLION, "size": 9, "symbol": "diamond"},
         "line": {"color": VERMILLION, "dash": "dash"}, "hovertemplate": "%{x}: %{y:.4s}OPS at the top<extra></extra>"},
    ]
    values = [v for r in rows for v in (r["total"], r["top"]) if v]
    log = bool(values) and max(values) / min(values) > 30
    layout = _layout(xaxis={"title": {"text": "edition"}, "type": "category"},
                     yaxis={"title": {"text": "OPS"}, "tickformat": "~s",
                            **({"type": "log", "dtick": 1} if log else {"rangemode": "tozero"})})
    return render(data, layout, div_id, height=340)


def vendor_share_over_editions(rows: Sequence[dict[str, Any]], div_id: str = "chart-vendor-editions") -> SafeString:
    editions_ = sorted({r["edition"] for r in rows})
    vendors = sorted({r["vendor"] for r in rows})
    counts = {(r["edition"], r["vendor"]): r["n"] for r in rows}
    data = [{"type": "bar", "name": v, "x": editions_, "y": [counts.get((e, v), 0) for e in editions_],
             "marker": {"color": VENDOR_COLOURS.get(v, PALETTE[(i + 3) % len(PALETTE)])},
             "hovertemplate": v + ": %{y:.1f}%<extra>%{x}</extra>"} for i, v in enumerate(vendors)]
    layout = _layout(barmode="stack", barnorm="percent",
                     xaxis={"title": {"text": "edition"}, "type": "category"},
                     yaxis={"title": {"text": "share of entries (%)"}, "range": [0, 100]})
    return render(data, layout, div_id, height=320)
