"""`/results/<id>`: charts of the stored series and trials, the verification report, and the downloads."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leaderboard import pipeline, ranking
from leaderboard.models import Edition, EditionEntry, Result
from tests.web.charts import figure

pytestmark = pytest.mark.django_db



def test_result_page_has_its_four_charts_and_the_local_plotly(client, demo_data):
    demo_data(8)
    r = Result.objects.live().first()
    resp = client.get(f"/results/{r.pk}")
    assert resp.status_code == 200
    html = resp.content.decode()
    for div in ("chart-score", "chart-accuracy", "chart-timeline", "chart-architectures"):
        assert f'id="{div}"' in html, div
        assert figure(html, div)["data"], div
    assert '<script src="/static/vendor/plotly-basic.min.js" defer></script>' in html
    assert '<script src="/static/site/charts.js" defer></script>' in html
    assert "<script>" not in html  # no inline script (the Content-Security-Policy allows none)
    assert "cdn.plot.ly" not in html and "cdn.jsdelivr" not in html  # no CDN anywhere
    assert html.count("/static/vendor/plotly-basic.min.js") == 1
    assert "steady-state window" in html  # the shaded window's label


def test_charts_draw_the_stored_figures(client, demo_data):
    """The score chart plots the stored series as it is: the web layer computes no score."""
    demo_data(4)
    r = Result.objects.live().first()
    html = client.get(f"/results/{r.pk}").content.decode()
    data = figure(html, "chart-score")["data"]
    points = r.series.points
    assert data[0]["y"] == [p["score"] for p in points]
    assert data[1]["y"] == [p["regulated"] for p in points]
    assert data[0]["y"][-1] == r.score_ops


def test_verification_report_lists_every_check(client, demo_data):
    demo_data(4)
    r = Result.objects.live().first()
    html = client.get(f"/results/{r.pk}").content.decode()
    table = html[html.index('id="verification-report"'):html.index("</table>", html.index('id="verification-report"'))]
    checks = r.report["checks"]
    assert table.count('<th scope="row"><code>') == len(checks) > 15
    for c in checks:
        assert f"<code>{c['name']}</code>" in table
    assert "Threshold" in table and "Measured" in table and "Outcome" in table
    assert table.count("✓ passed") == sum(c["passed"] for c in checks)
    assert table.count("✗ not passed") == sum(not c["passed"] for c in checks)


def test_demo_results_say_so(client, demo_data):
    demo_data(3)
    html = client.get(f"/results/{Result.objects.first().pk}").content.decode()
    assert "Demo data." in html and "Bundle: not stored (demo data)" in html


def test_series_downloads_are_the_stored_series(client, demo_data):
    demo_data(3)
    r = Result.objects.live().first()
    resp = client.get(f"/results/{r.pk}/series.csv")
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(resp.content.decode())))
    assert [float(x["score"]) for x in rows] == [p["score"] for p in r.series.points]
    assert list(rows[0]) == ["t", "work", "score", "regulated", "max_accuracy"]
    body = client.get(f"/results/{r.pk}/series.json").json()
    assert body["points"] == r.series.points and body["run_id"] == r.run_id
    assert client.get(f"/results/{r.pk}/series.xml").status_code == 404


def test_a_verified_upload_shows_its_report_and_downloads_its_bundle(client, real_result):
    result, data = real_result
    html = client.get(f"/results/{result.pk}").content.decode()
    assert "Demo data." not in html
    for c in result.report["checks"]:
        assert f"<code>{c['name']}</code>" in html
    assert f'href="/results/{result.pk}/bundle"' in html
    resp = client.get(f"/results/{result.pk}/bundle")
    assert resp.status_code == 200
    assert b"".join(resp.streaming_content) == data
    assert f"aiperf-{result.run_id}.tar.gz" in resp["Content-Disposition"]
    body = client.get(f"/results/{result.pk}/series.json").json()
    assert body["points"] == result.series.points
    for div in ("chart-score", "chart-accuracy", "chart-timeline", "chart-architectures"):
        assert f'id="{div}"' in html, div
    # The closed division's knobs as the run recorded them (run.json `tuning`), shown with the result.
    assert result.report["tuning"]["data_decoder"] == "tensor"
    assert (f"precision {result.precision}, image decoder tensor, loader workers auto, channels-last on, "
            "torch.compile off, CUDA graphs off") in html


def test_hidden_results_are_not_found(client, demo_data):
    demo_data(4)
    r = Result.objects.live().first()
    EditionEntry.objects.filter(result=r).delete()  # not cited by a frozen edition either
    Result.objects.filter(pk=r.pk).update(published=False)
    ranking.rerank()  # a change behind the service's back needs one (docs/service.md "Ranks and editions")
    assert client.get(f"/results/{r.pk}").status_code == 404
    assert client.get(f"/results/{r.pk}/series.json").status_code == 404
    assert client.get(f"/results/{r.pk}/bundle").status_code == 404
    assert client.get("/results/999999").status_code == 404


def test_a_withdrawn_result_cited_by_an_edition_stays_readable(client, demo_data):
    demo_data(6)
    r = Result.objects.live().first()
    if not EditionEntry.objects.filter(result=r).exists():
        ed = Edition.objects.create(name="test-ed", frozen_at=r.verified_at)
        EditionEntry.objects.create(edition=ed, result=r, division=r.division, rank=1, score_ops=r.score_ops,
                                    regulated_score_ops=r.regulated_score_ops)
    assert pipeline.withdraw(r.submission)
    html = client.get(f"/results/{r.pk}").content.decode()
    assert "Withdrawn on " in html and "standing-withdrawn" in html
    assert re.search(r"In frozen editions: <a href=\"/editions/", html)


def test_a_result_that_was_not_its_systems_best_in_an_edition_says_so(client, demo_data):
    """An edition ranks each system's best: another result of the system there has no rank, only its place among all."""
    demo_data(40)
    entry = EditionEntry.objects.filter(rank__isnull=True, rank_all__isnull=False).select_related("edition").first()
    assert entry is not None, "the demo's editions hold a system's second result"
    html = client.get(f"/results/{entry.result_id}").content.decode()
    line = html[html.index("In frozen editions:"):html.index("</p>", html.index("In frozen editions:"))]
    assert "rank None" not in line
    assert f"{entry.edition.name}</a> not its system's best there, #{entry.rank_all} among every result" in line


def test_result_page_query_count_is_bounded(client, demo_data):
    demo_data(20)
    r = Result.objects.live().order_by("-trials_finished").first()
    with CaptureQueriesContext(connection) as ctx:
        client.get(f"/results/{r.pk}")
    assert len(ctx) <= 10


def test_the_page_and_the_api_say_the_presets_known_spread(client, demo_data, monkeypatch):
    from aiperf_runner.spec import spread

    from leaderboard import listcache

    demo_data(4)
    r = Result.objects.live().first()
    html = client.get(f"/results/{r.pk}").content.decode()
    assert "Run-to-run spread of the preset" in html
    entry = spread.Spread(r.preset, 60.0, 2, 5, 0.031, 0.029, "a test machine", "2026-12-02")
    monkeypatch.setattr(spread, "MEASURED", (entry,))
    listcache.bump()  # a page cached before the table changed would live on for AIPERF_PAGE_CACHE_S
    html = client.get(f"/results/{r.pk}").content.decode()
    assert "CV 3.1% of the score, 2.9% of the regulated score" in html
    assert client.get(f"/api/v1/results/{r.pk}/").json()["known_spread"]["score_cv"] == 0.031
    monkeypatch.setattr(spread, "MEASURED", ())
    listcache.bump()
    assert "not measured for this preset" in client.get(f"/results/{r.pk}").content.decode()
    assert client.get(f"/api/v1/results/{r.pk}/").json()["known_spread"] is None



def test_a_run_on_a_pixel_pack_says_its_images_were_decoded_at_staging():
    from leaderboard.site.resultpage import _tuning_text

    knobs = pipeline.tuning({"tuning": {"precision": "bf16", "data_decoder": "tensor", "decoded_at_staging": True,
                               "data_workers": 8, "channels_last": True, "torch_compile": False, "cuda_graphs": False}})
    assert _tuning_text(knobs) == ("precision bf16, image decoder tensor, images decoded at staging on, loader workers 8, "
                                   "channels-last on, torch.compile off, CUDA graphs off")


def test_a_run_decoding_on_its_accelerators_says_so():
    from leaderboard.site.resultpage import _tuning_text

    knobs = pipeline.tuning({"tuning": {"precision": "bf16", "data_decoder": "device", "data_workers": 15}})
    assert _tuning_text(knobs) == ("precision bf16, image decoder device (JPEGs decoded on the accelerators: nvJPEG on "
                                   "GPUs), loader workers 15")
