"""manage.py aiperf_site and the admin's actions."""

from __future__ import annotations

import io

import pytest
from aiperf_runner.spec import keys
from django.core.management import CommandError, call_command

from leaderboard.models import Edition, Result, Site, SiteKey, Submission, hash_token
from tests.service.conftest import upload


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue().strip()


def test_site_create_prints_a_working_token(db):
    token = run("aiperf_site", "create", "Tsinghua", "--country", "cn")
    site = Site.objects.get(name="Tsinghua")
    assert site.country == "CN" and site.token_hash == hash_token(token)
    with pytest.raises(CommandError, match="exists"):
        run("aiperf_site", "create", "Tsinghua", "--country", "CN")
    with pytest.raises(CommandError, match="two-letter"):
        run("aiperf_site", "create", "Other", "--country", "China")
    new = run("aiperf_site", "token", "Tsinghua")
    assert new != token and Site.objects.get(name="Tsinghua").token_hash == hash_token(new)


def test_add_and_revoke_key(db, tmp_path):
    run("aiperf_site", "create", "S", "--country", "DE")
    key = keys.generate_key()
    _, pub = keys.save_key(key, tmp_path)
    assert "registered" in run("aiperf_site", "add-key", "S", str(pub))
    fp = keys.fingerprint(key)
    assert SiteKey.objects.get(fingerprint=fp).site.name == "S"
    assert f"revoked {fp}" in run("aiperf_site", "revoke-key", fp)
    assert SiteKey.objects.get(fingerprint=fp).revoked
    assert "already revoked" in run("aiperf_site", "revoke-key", fp)
    with pytest.raises(CommandError):
        run("aiperf_site", "revoke-key", "SHA256:nope")
    assert fp in run("aiperf_site", "list")


def test_register_key_through_the_api(site_a):
    key = keys.generate_key()
    resp = site_a.client.post("/api/v1/keys/", {"public_key": keys.public_line(key), "label": "new node"},
                              format="json")
    assert resp.status_code == 201 and resp.json()["fingerprint"] == keys.fingerprint(key)
    again = site_a.client.post("/api/v1/keys/", {"public_key": keys.public_b64(key)}, format="json")
    assert again.status_code == 200
    bad = site_a.client.post("/api/v1/keys/", {"public_key": "aiperf-ed25519 !!!"}, format="json")
    assert bad.status_code == 400
    pk = resp.json()["id"]
    assert site_a.client.post(f"/api/v1/keys/{pk}/revoke/").json()["revoked"] is True


def test_admin_pages_and_actions(site_a, make_bundle, admin_client):
    body = upload(site_a.client, make_bundle(site_a.key)).json()
    sub = Submission.objects.get(pk=body["id"])
    for url in ("/admin/leaderboard/site/", "/admin/leaderboard/sitekey/", "/admin/leaderboard/system/",
                "/admin/leaderboard/submission/", "/admin/leaderboard/result/", "/admin/leaderboard/trial/",
                "/admin/leaderboard/edition/", f"/admin/leaderboard/result/{sub.result.pk}/change/",
                "/admin/leaderboard/submission/?status__exact=verified"):
        assert admin_client.get(url).status_code == 200, url

    def act(model, action, pks):
        return admin_client.post(f"/admin/leaderboard/{model}/", {"action": action, "_selected_action": pks})

    act("submission", "withdraw", [sub.pk])
    assert Submission.objects.get(pk=sub.pk).status == "withdrawn" and not Result.objects.get().published
    Submission.objects.filter(pk=sub.pk).update(status="verified")
    act("submission", "publish", [sub.pk])
    assert Submission.objects.get(pk=sub.pk).status == "published" and Result.objects.get().published
    Result.objects.update(verifier_version="old")
    act("result", "reverify", [sub.result.pk])
    assert Result.objects.get().verifier_version != "old" and Result.objects.count() == 1
    key = SiteKey.objects.get()
    act("sitekey", "revoke", [key.pk])
    assert SiteKey.objects.get().revoked
    ed = Edition.objects.create(name="2026-06")
    act("edition", "freeze", [ed.pk])
    assert Edition.objects.get().frozen and ed.entries.count() == 1


def test_web_pages(site_a, make_bundle, client):
    body = upload(site_a.client, make_bundle(site_a.key)).json()
    home = client.get("/?division=open")  # a smoke run: the open division
    assert home.status_code == 200 and "Site A" in home.content.decode()
    page = client.get(f"/results/{body['result']}")
    assert page.status_code == 200
    text = page.content.decode()
    assert "integrity.chain" in text and str(body["score_ops"])[:6] in text
    assert "Software (as the run recorded it)" in text and "aiperf-runner 0.1.0" in text  # run.json's stack
    assert client.get("/results/999999").status_code == 404
