"""The security headers of every kind of response: CSP without inline scripts, nosniff, Referrer-Policy, HSTS.

HSTS is sent over HTTPS with DEBUG off (its setting is read from the environment: test_deploy_check.py).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

PATHS = ["/", "/methodology", "/api/v1/", "/api/schema/", "/api/docs/", "/admin/login/", "/healthz"]


@pytest.mark.parametrize("path", PATHS)
def test_headers_on_every_kind_of_response(client, path):
    resp = client.get(path)
    assert resp.status_code == 200, path
    assert resp["X-Content-Type-Options"] == "nosniff"
    assert resp["Referrer-Policy"] == "same-origin"
    assert resp["X-Frame-Options"] == "DENY"
    csp = dict(part.strip().split(" ", 1) for part in resp["Content-Security-Policy"].split(";") if part.strip())
    assert csp["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval', no other origin
    assert csp["default-src"] == "'self'" and csp["object-src"] == "'none'" and csp["frame-ancestors"] == "'none'"


def test_pages_carry_no_inline_script(client, transactional_db):
    from devdata import demo

    demo.generate(6, seed=3)
    from leaderboard.models import Result

    r = Result.objects.live().first()
    for path in ("/", f"/results/{r.pk}", f"/systems/{r.system_id}", f"/sites/{r.site_id}", "/statistics",
                 "/api/docs/"):
        html = client.get(path).content.decode()
        scripts = html.count("<script")
        assert scripts == html.count("<script src=") + html.count('<script type="application/json"'), path


def test_hsts_over_https_when_debug_is_off(client, settings):
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    resp = client.get("/healthz", secure=True)
    assert resp["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert "Strict-Transport-Security" not in client.get("/healthz")  # never over plain HTTP
