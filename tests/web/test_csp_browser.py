"""Every page type in chromium with the Content-Security-Policy on: no violation, and the charts still draw.

The pages: each of leaderboard/site/urls.py (list, editions, an edition, result, system, site, statistics,
methodology, and a 404), the API's browsable pages and its docs (/api/docs/), the admin's login, index,
and for every registered model its list and the change page of a row (one add page), plus the
review action's reason form (templates/admin/review_reason.html); a run attempt with a heartbeat is
made so that the run/attempt pages show a row.

A violation is caught twice: the `securitypolicyviolation` events of each document (recorded by an
init script, which the page's policy does not govern) and chromium's console errors. About 60 s
(about 45 pages).
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.utils import timezone

from leaderboard.models import Edition, Heartbeat, Result, RunAttempt
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
        ("/changes", None),
        ("/?division=open", "#ranked-list"),
        ("/apply", "form.apply"),
        (f"/compare?systems={r.system_id}", "table.compare"),
        ("/my-site/sign-in", "form.signin"),
        ("/api/v1/", None),  # DRF's browsable API
        ("/api/v1/results/", None),
        (f"/api/v1/results/{r.pk}/", None),
        ("/api/v1/systems/", None),  # a list with a write (its form shows to a signed-in admin)
        ("/api/docs/", ".swagger-ui .info"),
        ("/admin/login/", "#login-form"),
    ]


def admin_paths() -> list[str]:
    """Every registered model's list and the change page of its first row; one add page (the same template
    as a change page, without the row: one is enough)."""
    paths = ["/admin/", "/admin/leaderboard/site/add/"]
    for model in admin.site._registry:
        base = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        paths.append(base)
        if (row := model.objects.order_by("pk").first()) is not None:
            paths.append(f"{base}{row.pk}/change/")
    return paths


def run_attempt(r: Result) -> RunAttempt:
    """A witnessed run's record (the demo data has none), with one heartbeat: rows for the run/attempt pages."""
    attempt = RunAttempt.objects.create(run_id="c5" * 16, site=r.site, system=r.system, statement={"kind": "x"},
                                        signature="AA==", issued_at=timezone.now(), heartbeat_interval_s=60)
    Heartbeat.objects.create(attempt=attempt, heartbeat_seq=0, head="0" * 64, received_at=0.0, beacon="0" * 64,
                             key="k", signature="AA==")
    return attempt


def visit(context, path: str, ready: str | None, status: int = 200, idle: bool = True) -> list[str]:
    """The page's violations and console errors; `idle`: also wait until its requests settle (the charts'
    pages fetch after load; an admin page has loaded all its scripts by then: not waiting saves ~1 s a page)."""
    page = context.new_page()
    found: list[str] = []
    page.on("console", lambda m: found.append(f"console: {m.text}")
            if m.type == "error" and not (status != 200 and "status of" in m.text) else None)
    page.on("pageerror", lambda e: found.append(f"pageerror: {e}"))
    resp = page.goto(path)
    assert resp is not None and resp.status == status, path
    assert "script-src 'self'" in (resp.headers.get("content-security-policy") or ""), path
    if ready:
        try:
            page.wait_for_selector(ready, timeout=20_000)
        except PlaywrightTimeout:
            found.append(f"{ready} never appeared (a blocked script?)")
    if idle:
        page.wait_for_load_state("networkidle")
    found += [f"violation: {v}" for v in page.evaluate("window.__csp")]
    page.close()
    return found


def test_every_page_type_passes_the_csp(chromium, live_server, transactional_db, demo_data):  # noqa: F811
    demo_data(20)
    context = chromium.new_context(base_url=live_server.url)
    context.add_init_script(RECORD)
    problems = {path: found for path, ready in page_paths() if (found := visit(context, path, ready))}
    if found := visit(context, "/results/999999999", None, status=404):  # the not-found page
        problems["/results/999999999"] = found
    run_attempt(Result.objects.live().first())
    # The admin behind its login form (the login itself goes through django-axes).
    get_user_model().objects.create_superuser("admin", "admin@example.org", "a-long-test-password")
    page = context.new_page()
    page.goto("/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "a-long-test-password")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    page.close()
    pages = admin_paths()
    assert "/admin/leaderboard/runattempt/" in pages and any(p.endswith("/change/") and "runattempt" in p for p in pages)
    for path in pages:
        if found := visit(context, path, "#content", idle=False):
            problems[path] = found
    for path in ("/api/v1/systems/", f"/api/v1/results/{Result.objects.first().pk}/"):  # signed in: with forms
        if found := visit(context, path, None):
            problems[f"{path} (signed in)"] = found
    if found := review_reason_form(context):
        problems["review reason form"] = found
    context.close()
    if problems:
        pytest.fail("\n".join(f"{path}: {line}" for path, found in problems.items() for line in found))


def review_reason_form(context) -> list[str]:
    """The admin's review action asks for a reason on a page of its own (templates/admin/review_reason.html)."""
    page = context.new_page()
    found: list[str] = []
    page.on("console", lambda m: found.append(f"console: {m.text}") if m.type == "error" else None)
    page.goto("/admin/leaderboard/result/")
    page.locator("input.action-select").first.check()  # actions.js: ticking a row enables the action
    page.select_option("select[name=action]", "approve_review")
    page.click("button[name=index]")
    page.wait_for_selector("textarea#reason")
    found += [f"violation: {v}" for v in page.evaluate("window.__csp")]
    page.close()
    return found
