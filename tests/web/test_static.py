"""plotly.js is served from the project's static files, the copy of the installed plotly package's."""

from __future__ import annotations

import hashlib
from pathlib import Path

import plotly
import pytest
from django.contrib.staticfiles import finders

from tests.helpers import REPO

pytestmark = pytest.mark.django_db


def test_plotly_js_is_the_installed_packages_copy():
    ours = REPO / "static" / "vendor" / "plotly.min.js"
    theirs = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert ours.is_file(), "copy plotly/package_data/plotly.min.js to static/vendor/ (see docs/site.md)"
    assert hashlib.sha256(ours.read_bytes()).digest() == hashlib.sha256(theirs.read_bytes()).digest(), \
        "static/vendor/plotly.min.js differs from the installed plotly's: copy it again (docs/site.md)"
    assert finders.find("vendor/plotly.min.js") == str(ours)


def test_static_files_are_served(client):
    resp = client.get("/static/site/site.css")
    assert resp.status_code == 200
    resp = client.get("/static/vendor/plotly.min.js")
    assert resp.status_code == 200
