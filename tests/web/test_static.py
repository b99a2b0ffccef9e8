"""plotly.js is served from the project's static files: plotly's basic bundle (scatter, bar, pie) of the version
the installed plotly package draws with, and every chart the pages draw uses a trace type it holds."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import plotly
import pytest
from django.contrib.staticfiles import finders

from leaderboard.models import Result
from tests.helpers import REPO

pytestmark = pytest.mark.django_db

OURS = REPO / "static" / "vendor" / "plotly-basic.min.js"
BASIC_TRACES = {"scatter", "bar", "pie"}  # what plotly.js-basic-dist holds


def _version(header: str) -> str:
    found = re.search(r"plotly\.js (?:\(basic - minified\) )?v(\d+\.\d+\.\d+)", header)
    assert found, header
    return found.group(1)


def test_plotly_js_is_the_basic_bundle_of_the_installed_plotlys_version():
    theirs = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert OURS.is_file(), "put plotly.js-basic-dist-min's plotly-basic.min.js in static/vendor/ (docs/site.md)"
    head = OURS.read_text(errors="replace")[:200]
    assert "(basic - minified)" in head, head
    assert _version(head) == _version(theirs.read_text(errors="replace")[:200]), \
        "static/vendor/plotly-basic.min.js is not the installed plotly's plotly.js version: fetch it again (docs/site.md)"
    assert finders.find("vendor/plotly-basic.min.js") == str(OURS)


def test_every_chart_uses_a_trace_type_of_the_basic_bundle(client, demo_data):
    demo_data(12)
    result = Result.objects.live().order_by("-score_ops").first()
    pages = ["/statistics", f"/results/{result.pk}", f"/systems/{result.system_id}", f"/sites/{result.site_id}"]
    types: set[str] = set()
    for page in pages:
        html = client.get(page).content.decode()
        for raw in re.findall(r'class="aiperf-chart" [^>]*data-figure="([^"]*)"', html):
            types |= {trace.get("type", "scatter") for trace in json.loads(unescape(raw))["data"]}
    assert types and types <= BASIC_TRACES, types


def test_static_files_are_served(client):
    resp = client.get("/static/site/site.css")
    assert resp.status_code == 200
    resp = client.get("/static/vendor/plotly-basic.min.js")
    assert resp.status_code == 200
