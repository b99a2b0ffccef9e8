"""The public read API: leaderboard filters, ordering, pagination, ranks, results, exports, editions."""

from __future__ import annotations

import csv
import io

import pytest
from rest_framework.test import APIClient

from leaderboard import pipeline, ranking
from leaderboard.models import Edition, Result, Site, System
from tests.service.conftest import new_site, upload


@pytest.fixture
def populated(transactional_db, make_bundle):
    """Three sites, four results: two CPU systems and two 'GPU' systems, different speeds."""
    a = new_site("Alpha", "CN")
    b = new_site("Beta", "US")
    c = new_site("Gamma", "CN")
    specs = [
        (a, dict(epoch_seconds=10.0)),
        (a, dict(epoch_seconds=5.0, cpu_model="Another CPU @ 3.00GHz")),  # a second system of Alpha's
        (b, dict(epoch_seconds=2.5, accelerator_model="NVIDIA H100 80GB HBM3", accelerator_count=2,
                 declared_peak=1.0e14)),
        (c, dict(epoch_seconds=20.0, accelerator_model="AMD Instinct MI300X", accelerator_count=2,
                 declared_peak=1.0e14)),
    ]
    for site, kwargs in specs:
        resp = upload(site.client, make_bundle(site.key, **kwargs))
        assert resp.status_code == 201 and resp.json()["status"] == "verified", resp.json()
    return APIClient()


def test_leaderboard_ranked_by_score(populated):
    data = populated.get("/api/v1/leaderboard/").json()
    assert data["count"] == 4
    rows = data["results"]
    scores = [r["score_ops"] for r in rows]
    assert scores == sorted(scores, reverse=True)
    assert [r["rank"] for r in rows] == [1, 2, 3, 4]
    assert rows[0]["site"]["name"] == "Beta" and rows[0]["system"]["vendor"] == "NVIDIA"
    assert rows[0]["url"].endswith(f"/results/{rows[0]['id']}")
    assert all(r["efficiency"] == pytest.approx(r["score_ops"] / r["peak_flops"]) for r in rows)


def test_filters_keep_the_global_rank(populated):
    rows = populated.get("/api/v1/leaderboard/?country=cn").json()["results"]
    assert {r["site"]["name"] for r in rows} == {"Alpha", "Gamma"}
    assert [r["rank"] for r in rows] == [2, 3, 4]
    assert [r["site"]["name"] for r in populated.get("/api/v1/leaderboard/?vendor=amd").json()["results"]] == ["Gamma"]
    assert [r["site"]["name"] for r in populated.get("/api/v1/leaderboard/?accelerator=h100").json()["results"]] \
        == ["Beta"]
    assert populated.get("/api/v1/leaderboard/?division=official").json()["count"] == 0
    assert populated.get("/api/v1/leaderboard/?division=open").json()["count"] == 4
    assert populated.get("/api/v1/leaderboard/?division=bogus").status_code == 400


def test_ordering_and_pagination(populated):
    rows = populated.get("/api/v1/leaderboard/?ordering=score_ops").json()["results"]
    assert [r["rank"] for r in rows] == [4, 3, 2, 1]
    rows = populated.get("/api/v1/leaderboard/?ordering=-max_accuracy").json()["results"]
    accs = [r["max_accuracy"] for r in rows]
    assert accs == sorted(accs, reverse=True)
    page = populated.get("/api/v1/leaderboard/?page_size=3").json()
    assert len(page["results"]) == 3 and page["next"]
    page2 = populated.get(page["next"]).json()
    assert [r["rank"] for r in page2["results"]] == [4]


def test_csv_and_json_export_of_a_filtered_list(populated):
    resp = populated.get("/api/v1/leaderboard/?country=CN&format=csv&page_size=1")
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/csv")
    assert "attachment" in resp["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(resp.content.decode())))
    assert len(rows) == 3  # the whole filtered list, not a page
    assert {r["site.name"] for r in rows} == {"Alpha", "Gamma"}
    assert [int(r["rank"]) for r in rows] == [2, 3, 4]
    data = populated.get("/api/v1/leaderboard/?country=CN&format=json&page_size=1").json()
    assert isinstance(data, list) and len(data) == 3
    for path in ("/api/v1/results/", "/api/v1/systems/", "/api/v1/sites/", "/api/v1/submissions/",
                 "/api/v1/editions/", "/api/v1/keys/"):
        assert populated.get(path + "?format=csv").status_code == 200, path


def test_result_detail_has_series_and_report(populated):
    top = populated.get("/api/v1/leaderboard/").json()["results"][0]
    detail = populated.get(f"/api/v1/results/{top['id']}/").json()
    assert detail["rank"] == 1
    assert detail["series"] and {"t", "score", "regulated", "max_accuracy"} <= set(detail["series"][0])
    assert detail["series"][-1]["score"] == pytest.approx(detail["score_ops"])
    names = {c["name"] for c in detail["report"]["checks"]}
    assert {"integrity.chain", "plausibility.score_peak", "stability.score_cv"} & names
    trials = populated.get(f"/api/v1/results/{top['id']}/trials/").json()
    assert trials["count"] == 4 and trials["results"][0]["trial"] == "t0000"
    assert trials["results"][0]["train_flops_per_image"] > 0


def test_systems_sites_editions(populated):
    systems = populated.get("/api/v1/systems/").json()
    assert systems["count"] == 4  # Alpha ran on two machines
    sites = populated.get("/api/v1/sites/?country=CN").json()
    assert {s["name"] for s in sites["results"]} == {"Alpha", "Gamma"}
    alpha = next(s for s in sites["results"] if s["name"] == "Alpha")
    assert alpha["results"] == 2 and alpha["keys"][0]["fingerprint"].startswith("SHA256:")
    assert "token_hash" not in alpha

    edition = Edition.objects.create(name="2026-11", title="November 2026")
    assert ranking.freeze_edition(edition) == 4
    eds = populated.get("/api/v1/editions/").json()
    assert eds["results"][0]["name"] == "2026-11" and eds["results"][0]["entries"] == 4
    # After the freeze the live list changes; the edition does not.
    top = Result.objects.order_by("-score_ops").first()
    assert pipeline.withdraw(top.submission)  # off the live list, the way the service takes it off (re-ranked)
    live = populated.get("/api/v1/leaderboard/").json()
    frozen = populated.get("/api/v1/leaderboard/?edition=2026-11").json()
    assert live["count"] == 3 and live["results"][0]["rank"] == 1
    assert frozen["count"] == 4 and [r["rank"] for r in frozen["results"]] == [1, 2, 3, 4]
    assert populated.get(f"/api/v1/results/{top.pk}/").status_code == 200  # cited by the edition
    assert populated.get("/api/v1/leaderboard/?edition=1999-01").status_code == 404


def test_reads_are_public_writes_are_not(populated):
    assert populated.post("/api/v1/editions/", {"name": "x"}).status_code in (401, 403, 405)
    assert populated.post("/api/v1/keys/", {"public_key": "x"}).status_code in (401, 403)
    assert Site.objects.count() == 3 and System.objects.count() == 4
    assert populated.post("/api/v1/systems/", {"name": "x"}).status_code in (401, 403)
    assert populated.post("/api/v1/runs/", {"system": 1}).status_code in (401, 403)
    assert System.objects.count() == 4


def test_submission_status_endpoint(populated):
    subs = populated.get("/api/v1/submissions/?status=verified").json()
    assert subs["count"] == 4
    one = populated.get(f"/api/v1/submissions/{subs['results'][0]['id']}/").json()
    assert one["status"] == "verified" and one["score_ops"] > 0 and one["reasons"] == []


def test_one_entry_per_system_and_the_switch_for_every_result(transactional_db, make_bundle):
    site = new_site("Twice", "DE")
    for seconds in (10.0, 5.0):  # the same machine twice: the faster run is the system's entry
        assert upload(site.client, make_bundle(site.key, epoch_seconds=seconds)).json()["status"] == "verified"
    client = APIClient()
    shown = client.get("/api/v1/leaderboard/").json()
    assert shown["count"] == 1 and shown["results"][0]["rank"] == 1
    every = client.get("/api/v1/leaderboard/?all=1").json()
    assert every["count"] == 2 and [r["rank"] for r in every["results"]] == [1, 2]
    assert every["results"][0]["id"] == shown["results"][0]["id"]
    assert client.get("/api/v1/leaderboard/?rules=v1-compat").json()["count"] == 0
