"""Reading a chart out of a page: the plotly figure its <div> carries (leaderboard/site/charts.py)."""

from __future__ import annotations

import json
import re
from html import unescape
from typing import Any


def figure(html: str, div: str) -> dict[str, Any]:
    """The plotly figure of the chart <div id=div>: its data-figure attribute (static/site/charts.js draws it)."""
    found = re.search(rf'<div id="{div}" class="aiperf-chart" [^>]*data-figure="([^"]*)"', html)
    assert found, f"no chart {div}"
    return json.loads(unescape(found.group(1)))
