"""How numbers read on the pages: OPS and FLOP/s with SI prefixes, percentages, durations, countries.

The pages show stored figures only; these functions format them, they never compute a score.
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime

SI = ((1e24, "Y"), (1e21, "Z"), (1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float | None, unit: str, digits: int = 3) -> str:
    """1.234e15, "OPS" -> "1.23 POPS"; three significant digits; "–" for no value."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    v = float(value)
    if v == 0:
        return f"0 {unit}"
    for factor, prefix in SI:
        if abs(v) >= factor * 0.9995:
            scaled = v / factor
            return f"{_sig(scaled, digits)} {prefix}{unit}"
    return f"{_sig(v, digits)} {unit}"


def _sig(v: float, digits: int) -> str:
    if abs(v) >= 10 ** digits:
        return f"{v:,.0f}"
    v = float(f"{v:.{digits}g}")  # round first: 0.9996 -> 1.00, not 1.000
    decimals = max(digits - 1 - int(math.floor(math.log10(abs(v)))), 0) if v else 0
    return f"{v:.{decimals}f}"


def ops(value: float | None) -> str:
    return si(value, "OPS")


def flops(value: float | None) -> str:
    return si(value, "FLOP/s")


def bytes_(value: float | None) -> str:
    """Bytes in binary units: 512 GiB."""
    if value is None:
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{_sig(value, 3)} {unit}"
        value /= 1024
    return "–"


def runs(scores: list[float]) -> dict[str, str]:
    """A system's runs in words: best, median and spread (best / worst - 1) of their scores ('–' for none)."""
    ordered = sorted(scores)
    if not ordered:
        return {"best": "–", "median": "–", "spread": "–"}
    spread = percent(ordered[-1] / ordered[0] - 1.0) if ordered[0] > 0 else "–"
    return {"best": ops(ordered[-1]), "median": ops(statistics.median(ordered)), "spread": spread}


def flop(value: float | None) -> str:
    return si(value, "FLOP")


def percent(value: float | None, decimals: int = 1) -> str:
    if value is None:
        return "–"
    pct = 100.0 * float(value)
    if 0 < abs(pct) < 10 ** -decimals:  # a tiny share still shows its size: 0.03 %, not 0.0 %
        return f"{pct:.2g} %"
    return f"{pct:.{decimals}f} %"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = int(round(float(seconds)))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h} h {m:02d} min"
    if m:
        return f"{m} min {sec:02d} s"
    return f"{float(seconds):.1f} s"


def date(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d") if value else "–"


def number(value, decimals: int = 4) -> str:
    """A check's threshold or measured value as text (numbers, lists, objects, booleans)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.{decimals}g}"
        return f"{value:.{decimals}g}" if abs(value) < 1 else f"{value:,.{max(decimals - 2, 0)}f}".rstrip("0").rstrip(".")
    if isinstance(value, (list, tuple)):
        return ", ".join(number(v, decimals) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {number(v, decimals)}" for k, v in value.items())
    return str(value)


COUNTRIES = {
    "AE": "United Arab Emirates", "AR": "Argentina", "AT": "Austria", "AU": "Australia", "BE": "Belgium",
    "BR": "Brazil", "CA": "Canada", "CH": "Switzerland", "CL": "Chile", "CN": "China", "CZ": "Czechia",
    "DE": "Germany", "DK": "Denmark", "EG": "Egypt", "ES": "Spain", "FI": "Finland", "FR": "France",
    "GB": "United Kingdom", "GR": "Greece", "HK": "Hong Kong", "HU": "Hungary", "ID": "Indonesia", "IE": "Ireland",
    "IL": "Israel", "IN": "India", "IT": "Italy", "JP": "Japan", "KR": "South Korea", "LU": "Luxembourg",
    "MX": "Mexico", "MY": "Malaysia", "NL": "Netherlands", "NO": "Norway", "NZ": "New Zealand", "PL": "Poland",
    "PT": "Portugal", "QA": "Qatar", "RU": "Russia", "SA": "Saudi Arabia", "SE": "Sweden", "SG": "Singapore",
    "SI": "Slovenia", "TH": "Thailand", "TR": "Türkiye", "TW": "Taiwan", "UA": "Ukraine", "US": "United States",
    "VN": "Vietnam", "ZA": "South Africa",
}


def country(code: str | None) -> str:
    if not code:
        return "–"
    return COUNTRIES.get(code.upper(), code.upper())


def system_label(system) -> str:
    """A system's name, or what it is when it has none."""
    if system.name:
        return system.name
    if system.accelerator_count:
        return f"{system.accelerator_model} system, {system.nodes} node{'s' if system.nodes != 1 else ''}"
    return f"{system.cpu_model or 'CPU'} system, {system.nodes} node{'s' if system.nodes != 1 else ''}"


def level_label(level: str) -> str:
    """A verification level in words."""
    return {"full": "Full", "partial": "Partial"}.get(level, level or "–")


def list_label(workload: str) -> str:
    """The list a result is ranked on: AIPerf (images) or AIPerf-LLM."""
    return "AIPerf-LLM" if workload == "llm" else "AIPerf"


def loss(value: float | None) -> str:
    """A validation loss (AIPerf-LLM), in nats."""
    return "–" if value is None else f"{value:.4f} nats"
