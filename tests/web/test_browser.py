"""The pages in a real browser: Debian's chromium, headless, driven by Playwright.

Screenshots go to test-artifacts/ (git-ignored). Under AIPERF_REQUIRE_SERVICES=1 a missing chromium fails.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from leaderboard.models import Result, System
from tests.helpers import REPO, need_service

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = REPO / "test-artifacts"

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture(scope="module")
def chromium():
    need_service(os.path.exists(CHROMIUM), f"chromium not found at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - playwright is in requirements-dev.txt
        need_service(False, "playwright is not installed (pip install playwright)")
    # The sync API keeps an event loop running in this thread while the browser is open; the ORM calls
    # of the tests (and the database flush between them) are still synchronous and safe.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            yield browser
            browser.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def web(chromium, live_server):
    """A page of a fresh browser context whose relative URLs go to the live server."""
    ARTIFACTS.mkdir(exist_ok=True)
    context = chromium.new_context(viewport={"width": 1400, "height": 900}, base_url=live_server.url)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    pg.errors = errors
    yield pg
    context.close()


def shot(page, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path


@pytest.fixture
def data(transactional_db, demo_data):
    return demo_data(60, llm_results=6)  # AIPerf-LLM's list too: six runs generated and verified (devdata/llmdemo.py)


def scores(page) -> list[float]:
    return [float(x) for x in page.locator("td.col-score a").evaluate_all("els => els.map(e => e.dataset.score)")]


def test_list_loads_filters_and_sorts(web, data):
    web.goto("/")
    rows = web.locator("#ranked-list tbody tr[data-result]")
    # One division per table: the official one by default, the open one a tab away.
    assert rows.count() == Result.objects.entries().filter(division="official", workload="image").count()
    assert web.locator("td.col-division").count() == 0  # one division per table: the tab says which
    assert "in the official division" in web.inner_text(".listbar .count")
    assert web.locator("h1").inner_text() == "The AIPerf list"
    shot(web, "list")
    web.click(".division-tabs a:has-text('Open')")
    web.wait_for_url(re.compile(r"division=open"))
    assert rows.count() == Result.objects.entries().filter(division="open", workload="image").count()
    assert "in the open division" in web.inner_text(".listbar .count")
    shot(web, "list-open")

    # filter: a GET form, so the filter lands in the URL
    web.select_option("#f-division", "official")
    web.click("button:has-text('Apply filters')")
    web.wait_for_url(re.compile(r"division=official"))
    assert "in the official division" in web.inner_text(".listbar .count")
    assert rows.count() == Result.objects.entries().filter(division="official", workload="image").count()

    # sort by a header link: highest score first, then reversed; the filter stays
    web.click("th.col-score a")
    web.wait_for_url(re.compile(r"sort=-score"))
    assert "division=official" in web.url
    s = scores(web)
    assert s == sorted(s, reverse=True)
    assert web.locator("th.col-score").get_attribute("aria-sort") == "descending"
    web.click("th.col-score a")
    web.wait_for_url(re.compile(r"sort=score"))
    s = scores(web)
    assert s == sorted(s)
    shot(web, "list-filtered-sorted")

    # the CSV link downloads exactly these rows
    with web.expect_download() as info:
        web.click(".downloads a:has-text('CSV') >> nth=0")
    text = Path(info.value.path()).read_text()
    ids = [int(line.split(",")[2]) for line in text.strip().splitlines()[1:]]
    assert ids == [int(x) for x in rows.evaluate_all("els => els.map(e => e.dataset.result)")]
    assert not web.errors, web.errors


def test_list_is_usable_by_keyboard_and_on_a_phone(web, data, chromium, live_server):
    web.goto("/")
    web.keyboard.press("Tab")
    skip = web.locator("a.skip")
    assert skip.evaluate("e => e === document.activeElement")
    assert skip.is_visible()  # the skip link shows when focused
    web.keyboard.press("Enter")
    assert web.evaluate("document.activeElement.id") == "main"
    # focus is drawn: the focused control has an outline
    web.focus("#f-division")
    assert web.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"

    phone = chromium.new_context(viewport={"width": 390, "height": 844}, base_url=live_server.url,
                                 is_mobile=True, has_touch=True)
    p = phone.new_page()
    p.goto("/")
    # the page itself does not scroll sideways; only the table's own region does
    assert p.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    assert p.locator("#ranked-list tbody tr[data-result]").count() > 0
    p.screenshot(path=str(ARTIFACTS / "list-phone.png"), full_page=False)
    phone.close()


@pytest.mark.parametrize("width", [1366, 1400])
def test_the_list_fits_a_laptops_width(web, data, width):
    """Every column of the list, the date last, is inside the window at 1366 and 1400 px: no sideways scroll."""
    web.set_viewport_size({"width": width, "height": 900})
    for division in ("official", "open"):
        web.goto(f"/?division={division}")
        assert web.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), (division, width)
        table = web.locator("#ranked-list").bounding_box()
        assert table is not None and table["x"] + table["width"] <= width, (division, width, table)
        last = web.locator("#ranked-list tbody tr[data-result] td").last.bounding_box()
        assert last is not None and last["x"] + last["width"] <= width, (division, width, last)
    shot(web, f"list-open-{width}px")


def test_no_public_page_scrolls_sideways_on_a_phone(web, data):
    """At 400 px the page itself never scrolls sideways: wide tables scroll inside their own region."""
    from leaderboard.models import Edition

    result = Result.objects.live().filter(workload="image").order_by("-score_ops").first()
    edition = Edition.objects.filter(frozen_at__isnull=False).first()
    systems = list(System.objects.order_by("pk").values_list("pk", flat=True)[:3])
    llm = Result.objects.live().filter(workload="llm").order_by("-trials_finished").first()  # its own columns
    web.set_viewport_size({"width": 400, "height": 900})
    paths = ["/", "/?division=open", "/?workload=llm", "/?workload=llm&division=open", f"/results/{llm.pk}",
             f"/systems/{llm.system_id}", "/statistics?workload=llm",
             "/editions/", f"/editions/{edition.name}/", "/statistics", "/methodology",
             "/changes", "/apply", f"/results/{result.pk}", f"/systems/{result.system_id}",
             f"/sites/{result.site_id}", f"/compare?systems={','.join(map(str, systems))}", "/my-site/"]
    wide = []
    for path in paths:
        assert web.goto(path).status == 200, path
        width = web.evaluate("document.documentElement.scrollWidth")
        if width > 401:
            wide.append((path, width))
    assert not wide, wide
    assert not web.errors, web.errors


def test_result_page_charts_render(web, data):
    r = Result.objects.live().filter(workload="image").order_by("-trials_finished").first()
    web.goto(f"/results/{r.pk}")
    for chart in ("chart-score", "chart-accuracy", "chart-timeline", "chart-architectures"):
        web.wait_for_selector(f"#{chart} .main-svg", timeout=20_000)
        assert web.locator(f"#{chart} svg.main-svg").count() >= 1, chart
    # the steady-state window is drawn as a shape in the score chart
    assert web.locator("#chart-score .shapelayer path").count() >= 1
    # the score line has as many points as the stored series
    n = web.evaluate("document.getElementById('chart-score').data[0].y.length")
    assert n == len(r.series.points)
    assert web.locator("#verification-report tbody tr[id^=check-]").count() == len(r.report["checks"])
    shot(web, "result")
    assert not web.errors, web.errors


def test_system_page_shows_the_scaling_chart(web, data):
    candidates = [s for s in System.objects.order_by("-nodes")
                  if Result.objects.live().filter(site=s.site, system__accelerator_model=s.accelerator_model,
                                                  workload="image").values("system__nodes").distinct().count() > 1
                  and Result.objects.live().filter(system=s, workload="image").exists()]
    s = candidates[0] if candidates else Result.objects.live().filter(workload="image").first().system
    web.goto(f"/systems/{s.pk}")
    web.wait_for_selector("#chart-scaling .main-svg", timeout=20_000)
    legend = web.locator("#chart-scaling .legend").text_content()
    assert "linear scaling" in legend and "this system" in legend
    assert web.locator("#chart-scaling .scatterlayer .trace").count() >= 2
    web.wait_for_selector("#chart-history .main-svg")
    shot(web, "system")
    assert not web.errors, web.errors


def test_an_llm_result_and_its_systems_page_render(web, data):
    """An AIPerf-LLM result (a generated run verified by spec.verify): its charts draw the loss, not an accuracy,
    one point per finished trial; its system's page charts the LLM results apart."""
    r = Result.objects.live().filter(workload="llm").order_by("-trials_finished").first()
    web.goto(f"/results/{r.pk}")
    for chart in ("chart-score", "chart-loss", "chart-timeline", "chart-architectures"):
        web.wait_for_selector(f"#{chart} .main-svg", timeout=20_000)
    assert web.locator("#chart-accuracy").count() == 0
    assert web.evaluate("document.getElementById('chart-score').data[0].y.length") == len(r.series.points)
    shot(web, "result-llm")
    web.goto(f"/systems/{r.system_id}")
    web.wait_for_selector("#chart-history-llm .main-svg", timeout=20_000)
    shot(web, "system-llm")
    web.goto("/?workload=llm")
    assert web.locator("#ranked-list tbody tr[data-result]").count() == \
        Result.objects.entries().filter(workload="llm", division="official").count() > 0
    shot(web, "list-llm")
    assert not web.errors, web.errors


def test_statistics_and_methodology_render(web, data):
    web.goto("/statistics")
    for chart in ("chart-vendor", "chart-country", "chart-editions"):
        web.wait_for_selector(f"#{chart} .main-svg", timeout=20_000)
    shot(web, "statistics")
    web.goto("/methodology")
    assert "Rules and thresholds" in web.inner_text("main")
    web.goto("/editions/")
    web.click("table.editions tbody a >> nth=0")
    web.wait_for_url(re.compile(r"/editions/[^/]+/$"))
    assert web.locator("#ranked-list tbody tr[data-result]").count() > 0
    shot(web, "edition")
    assert not web.errors, web.errors


def test_a_really_verified_result_renders(web, real_result):
    """The pages on a result the pipeline verified from a signed bundle (not generated demo data)."""
    result, _ = real_result
    web.goto(f"/results/{result.pk}")
    for chart in ("chart-score", "chart-accuracy", "chart-timeline", "chart-architectures"):
        web.wait_for_selector(f"#{chart} .main-svg", timeout=20_000)
    assert "Demo data" not in web.inner_text("main")
    assert web.locator("a:has-text('Signed bundle')").count() == 1
    shot(web, "result-verified")
    web.goto(f"/?division={result.division}")
    assert web.locator(f'tr[data-result="{result.pk}"]').count() == 1
    assert not web.errors, web.errors


def test_compare_apply_and_a_sites_own_page(web, data):
    """A reader compares two systems; a centre applies; a site signs in and sees its submissions."""
    a, b = Result.objects.entries().filter(division="official", workload="image").order_by("-score_ops")[:2]
    web.goto(f"/systems/{a.system_id}")
    web.click("a:has-text('Compare this system')")
    web.fill("#f-systems", f"{a.system_id},{b.system_id}")
    web.click("button:has-text('Compare')")
    web.wait_for_url(re.compile(r"/compare\?systems="))
    assert web.locator("table.compare thead th").count() == 3
    shot(web, "compare")

    web.goto("/apply")
    for field, value in (("#id_centre", "Browser Test Centre"), ("#id_country", "NL"),
                         ("#id_contact_name", "A. Tester"), ("#id_contact_email", "tester@example.org"),
                         ("#id_systems", "8 nodes, 8 x H100 each")):
        web.fill(field, value)
    shot(web, "apply")
    web.click("button:has-text('Send the application')")
    assert "waits for a list maintainer" in web.inner_text("main")

    site = a.site
    token = site.new_token()
    site.save()
    web.goto("/my-site/")
    web.fill("#f-token", token)
    web.click("button:has-text('Sign in')")
    web.wait_for_url(re.compile(r"/my-site/$"))
    assert web.locator(f'tr[data-submission="{a.submission_id}"]').count() == 1
    shot(web, "my-site")
    web.set_viewport_size({"width": 400, "height": 800})
    web.goto("/")
    box = web.locator("td.col-score").first.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 400, box  # the score in view on a phone, no scrolling
    shot(web, "list-400px")
    web.goto("/?division=open")
    shot(web, "list-open-400px")
    for name, path in (("compare", f"/compare?systems={a.system_id},{b.system_id}"), ("apply", "/apply"),
                       ("my-site", "/my-site/")):
        web.goto(path)
        heading = web.locator("h1").bounding_box()
        assert heading is not None and heading["x"] + heading["width"] <= 400, (name, heading)
        shot(web, f"{name}-400px")
    assert not web.errors, web.errors


def test_a_result_in_each_trust_state_at_1400_and_400_px(web, data):
    """Each result's page says where it stands, in its banner and its trust line, on a desktop and on a phone:
    on the list audited, waiting for its audit, in review, refused by review, withdrawn (when, by whom, why)."""
    from django.utils import timezone

    from leaderboard import pipeline, ranking

    live, audit_pending, in_review, refused, withdrawn = Result.objects.entries().filter(workload="image",
        division="official").order_by("-score_ops")[:5]
    Result.objects.filter(pk=audit_pending.pk).update(audit=Result.Audit.PENDING)
    Result.objects.filter(pk=in_review.pk).update(review=Result.Review.PENDING,
                                                  review_reason="its efficiency is above the review band")
    Result.objects.filter(pk=refused.pk).update(review=Result.Review.REJECTED, reviewed_at=timezone.now(),
                                                reviewed_by="a maintainer", review_reason="the peak registered is low")
    ranking.rerank()
    assert pipeline.withdraw(withdrawn.submission, by="a maintainer", reason="the site asked for it")
    states = {"live": live, "audit_pending": audit_pending, "review_pending": in_review,
              "review_rejected": refused, "withdrawn": withdrawn}
    for width in (1400, 400):
        web.set_viewport_size({"width": width, "height": 900})
        for state, result in states.items():
            web.goto(f"/results/{result.pk}")
            banner = web.locator(f"p.banner.standing-{state}")
            assert banner.count() == 1, (state, web.inner_text("main")[:300])
            box = banner.bounding_box()
            assert box is not None and box["x"] + box["width"] <= width, (state, width, box)
            assert web.locator("ul.trust li").count() >= 4, state
            shot(web, f"result-{state}-{width}px")
        assert "the site asked for it" in web.inner_text("p.banner.standing-withdrawn")
    assert not web.errors, web.errors
