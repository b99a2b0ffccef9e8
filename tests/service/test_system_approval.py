"""A maintainer approves or rejects a registered system from a shell (`manage.py aiperf_system`), with the
reason on its record; its results are re-verified under the new status (AIPERF_SYSTEM_APPROVAL=manual:
every registration waits for a maintainer)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from leaderboard.models import Result, System
from tests.service.conftest import upload

H100 = "NVIDIA H100 80GB HBM3"


def manage(*args: str) -> str:
    out = io.StringIO()
    call_command("aiperf_system", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue().strip()


def registered(site) -> dict:
    resp = site.client.post("/api/v1/systems/", {"name": "Hopper box", "accelerator_model": H100,
                                                 "accelerators_per_node": 8, "nodes": 1}, format="json")
    assert resp.status_code == 201, resp.content
    return resp.json()


def checks_of(result: Result) -> dict[str, bool]:
    return {c["name"]: c["passed"] for c in result.report["checks"]}


def test_approve_and_reject_with_a_reason_reverify_the_results(site_a, make_bundle, settings):
    settings.AIPERF_SYSTEM_APPROVAL = "manual"
    system = registered(site_a)
    assert system["status"] == "pending" and "by hand" in system["status_reason"]
    assert str(system["id"]) in manage("list", "--pending")
    body = upload(site_a.client, make_bundle(site_a.key, system_id=system["id"])).json()
    assert checks_of(Result.objects.get(pk=body["result"]))["system.registered"] is False

    out = manage("approve", str(system["id"]), "--reason", "site visit 2026-12-01, 8 GPUs seen", "--by", "mia")
    assert out.startswith("1 system(s) approved") and "1 result(s) queued" in out
    row = System.objects.get(pk=system["id"])
    assert row.status == System.Status.APPROVED and row.status_reason == "approved by mia: site visit 2026-12-01, " \
                                                                         "8 GPUs seen"
    assert checks_of(Result.objects.get(pk=body["result"]))["system.registered"] is True  # re-verified
    api = site_a.client.get(f"/api/v1/systems/{system['id']}/").json()
    assert api["status"] == "approved" and "site visit" in api["status_reason"]
    assert str(system["id"]) not in manage("list", "--pending")

    manage("reject", str(system["id"]), "--reason", "the nodes are rented by the hour", "--by", "mia")
    assert System.objects.get(pk=system["id"]).status == System.Status.REJECTED
    after = Result.objects.get(pk=body["result"])
    assert checks_of(after)["system.registered"] is False and after.division != "official"


def test_a_decision_needs_a_reason_and_a_registered_system(site_a, settings):
    settings.AIPERF_SYSTEM_APPROVAL = "manual"
    system = registered(site_a)
    with pytest.raises(CommandError, match="reason"):
        manage("approve", str(system["id"]), "--reason", "  ")
    with pytest.raises(CommandError, match="no registered system with id 999"):
        manage("approve", str(system["id"]), "999", "--reason", "ok")
    assert System.objects.get(pk=system["id"]).status == System.Status.PENDING  # nothing changed
