"""Option types and parsers the commands share: --server, --token, --json, durations, KEY=VALUE options.

Here, not in a command's module, so that no command module imports another.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import typer

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

Server = Annotated[str | None, typer.Option("--server", help="The service's base URL, e.g. https://aiperf.example.org "
                                            "(default: $AIPERF_SERVER, else what `register` saved).",
                                            show_default=False)]
Token = Annotated[str | None, typer.Option("--token", help="The site's API token (default: $AIPERF_TOKEN, else "
                                           "what `register` saved).", show_default=False)]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]


def parse_duration(text: str) -> float:
    """'5m' -> 300.0; '90s', '1.5h', '300' (seconds) also work."""
    m = DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise typer.BadParameter(f"{text!r}: expected a positive duration like 90s, 5m, 1h")
    return float(m.group(1)) * UNITS[m.group(2).lower()]


def parse_options(items: list[str] | None, what: str) -> dict[str, Any]:
    """`KEY=VALUE` items as a dict: the value as JSON where it parses, else as text; dashes in keys become `_`."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{what} {item!r}: expected KEY=VALUE")
        try:
            out[key.replace("-", "_")] = json.loads(value)
        except ValueError:
            out[key.replace("-", "_")] = value
    return out


def format_ops(value: float) -> str:
    """Operations per second with a unit (GOPS ... EOPS), three significant digits."""
    for unit, scale in (("EOPS", 1e18), ("POPS", 1e15), ("TOPS", 1e12), ("GOPS", 1e9)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} OPS"
