"""Every page type in chromium with the Content-Security-Policy on: no violation, and the charts still draw.

A violation is caught twice: the `securitypolicyviolation` events of each document (recorded by an
init script, which the page's policy does not govern) and chromium's console errors. About 25 s.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from leaderboard.models import Edition, Result
from tests.web.test_browser import chromium  # noqa: F401 - the shared browser fixture

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # pragma: no cover - the chromium fixture then skips (or fails under AIPERF_REQUIRE_SERVICES)
    PlaywrightTimeout = TimeoutError  # type: ignore[misc,assignment]

pytestmark = [pytest.mark.services, pytest.mark.slow]

RECORD = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", e => window.__csp.push(
    e.violatedDirective + " blocked " + (e.blockedURI || "inline") + " at " + e.sourceFile + ":" + e.lineNumber));
"""


def page_paths() -> list[tuple[str, str | None]]:
    """(path, a selector the page must show once its scripts ran) for each page type."""
    r = Result.objects.live().order_by("-trials_finished").first()
    edition = Edition.objects.filter(frozen_at__isnull=False).first()
    return [
        ("/", "#ranked-list tbody tr[data-result]"),
        ("/editions/", None),
        (f"/editions/{edition.name}/", "#ranked-list"),
        (f"/results/{r.pk}", "#chart-score svg.main-svg"),
        (f"/systems/{r.system_id}", "#chart-history svg.main-svg"),
        (f"/sites/{r.site_id}", None),
        ("/statistics", "#chart-vendor svg.main-svg"),
        ("/methodology", None),
        ("/api/v1/", None),  # DRF's browsable API
        ("/api/v1/results/", None),
        ("/api/docs/", ".swagger-ui .info"),
        ("/admin/login/", "#login-form"),
    ]


def visit(context, path: str, ready: str | None) -> list[str]:
    page = context.new_page()
    found: list[str] = []
    page.on("console", lambda m: found.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: found.append(f"pageerror: {e}"))
    resp = page.goto(path)
    assert resp is not None and resp.status == 200, path
    assert "script-src 'self'" in (resp.headers.get("content-security-policy") or ""), path
    if ready:
        try:
            page.wait_for_selector(ready, timeout=20_000)
        except PlaywrightTimeout:
            found.append(f"{ready} never appeared (a blocked script?)")
    page.wait_for_load_state("networkidle")
    found += [f"violation: {v}" for v in page.evaluate("window.__csp")]
    page.close()
    return found


def test_every_page_type_passes_the_csp(chromium, live_server, transactional_db, demo_data):  # noqa: F811
    demo_data(20)
    context = chromium.new_context(base_url=live_server.url)
    context.add_init_script(RECORD)
    problems = {path: found for path, ready in page_paths() if (found := visit(context, path, ready))}
    # The admin behind its login form (the login itself goes through django-axes).
    get_user_model().objects.create_superuser("admin", "admin@example.org", "a-long-test-password")
    page = context.new_page()
    page.goto("/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "a-long-test-password")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    page.close()
    for path in ("/admin/", "/admin/leaderboard/result/", f"/admin/leaderboard/result/{Result.objects.first().pk}/change/"):
        if found := visit(context, path, "#content"):
            problems[path] = found
    context.close()
    if problems:
        pytest.fail("\n".join(f"{path}: {line}" for path, found in problems.items() for line in found))
