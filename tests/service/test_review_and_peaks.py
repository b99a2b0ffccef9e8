"""A list maintainer's hands on the list: a model's peak added re-verifies the systems waiting for it, the
review of an outlier approved or rejected with a reason, and the rules and review filters of the list and API."""

from __future__ import annotations

from leaderboard import ranking
from leaderboard.models import Result, System
from tests.service.conftest import upload

UNKNOWN_MODEL = "Zeta Z9 Accelerator"


def checks_of(result: Result) -> dict[str, bool]:
    return {c["name"]: c["passed"] for c in result.report["checks"]}


def register_unknown(site) -> dict:
    resp = site.client.post("/api/v1/systems/", {
        "name": "Zeta cluster", "accelerator_model": UNKNOWN_MODEL, "accelerators_per_node": 2, "nodes": 1,
        "cpu_model": "Some CPU", "cpu_cores": 16}, format="json")
    assert resp.status_code == 201, resp.content
    return resp.json()


def test_a_peak_added_by_a_maintainer_approves_the_system_and_reverifies(site_a, make_bundle, admin_client):
    system = register_unknown(site_a)
    assert system["status"] == "pending"
    body = upload(site_a.client, make_bundle(site_a.key, system_id=system["id"], accelerator_model=UNKNOWN_MODEL,
                                             accelerator_count=2, declared_peak=1.0e14)).json()
    before = Result.objects.get(pk=body["result"])
    assert checks_of(before)["system.peak"] is False and checks_of(before)["system.registered"] is False

    resp = admin_client.post("/admin/leaderboard/acceleratorpeak/add/", {
        "accelerator_model": UNKNOWN_MODEL, "vendor": "Zeta", "fp32": 5e13, "tf32": 1e14, "bf16": 2e14,
        "fp16": 2e14, "source": "https://zeta.example/z9-datasheet.pdf", "created_at_0": "2026-12-01",
        "created_at_1": "12:00:00"})
    assert resp.status_code == 302, resp.content.decode()[:2000]

    assert System.objects.get(pk=system["id"]).status == System.Status.APPROVED
    after = Result.objects.get(pk=body["result"])  # the same row, re-verified under the new peak
    assert Result.objects.filter(submission_id=body["id"]).count() == 1
    assert checks_of(after)["system.peak"] is True and checks_of(after)["system.registered"] is True
    assert after.peak_flops and after.peak_flops > 0


def test_review_needs_a_reason_and_moves_the_result(site_a, make_bundle, admin_client, client):
    upload(site_a.client, make_bundle(site_a.key))
    result = Result.objects.get()
    Result.objects.filter(pk=result.pk).update(review=Result.Review.PENDING, review_reason="efficiency 3x the median")
    ranking.rerank()
    assert Result.objects.get().rank is None

    # The filters show it under review, on the page and in the API, and not on the list.
    api = client.get("/api/v1/leaderboard/?review=pending").json()
    assert [r["id"] for r in api["results"]] == [result.pk]
    assert client.get("/api/v1/leaderboard/").json()["count"] == 0
    assert f"/results/{result.pk}" in client.get("/?review=pending").content.decode()

    def act(**extra: str):
        return admin_client.post("/admin/leaderboard/result/", {"action": "approve_review",
                                                                "_selected_action": [result.pk], **extra})

    asked = act()  # no reason yet: the form asks for one and nothing changes
    assert asked.status_code == 200 and b"reason" in asked.content
    assert Result.objects.get().review == Result.Review.PENDING
    act(apply="1", reason="datasheet checked")
    done = Result.objects.get()
    assert done.review == Result.Review.APPROVED and "datasheet checked" in done.review_reason
    assert done.rank == 1
    assert [r["id"] for r in client.get("/api/v1/leaderboard/").json()["results"]] == [result.pk]


def test_the_v1_compat_list_is_its_own(site_a, make_bundle, client):
    upload(site_a.client, make_bundle(site_a.key))
    assert client.get("/api/v1/leaderboard/?rules=v1-compat").json()["count"] == 0
    Result.objects.update(rules="v1-compat")
    ranking.rerank()
    assert client.get("/api/v1/leaderboard/").json()["count"] == 0
    rows = client.get("/api/v1/leaderboard/?rules=v1-compat").json()["results"]
    assert len(rows) == 1 and rows[0]["rules"] == "v1-compat" and rows[0]["rank"] == 1
    assert "v1-compat" in client.get("/?rules=v1-compat").content.decode()
