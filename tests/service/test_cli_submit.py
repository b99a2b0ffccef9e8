"""`aiperf-runner register` and `submit` against a live service (embedded mode: tasks in-process)."""

from __future__ import annotations

import json

import pytest
from aiperf_runner.cli import app
from aiperf_runner.spec import keys
from aiperf_runner.spec.verify import verify
from typer.testing import CliRunner

from leaderboard.models import Result, SiteKey, Submission
from tests.service.conftest import new_site


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    path = tmp_path / "config"
    monkeypatch.setenv("AIPERF_CONFIG_DIR", str(path))
    key = keys.generate_key()
    keys.save_key(key, path)
    return path


def cli(*args: str):
    result = CliRunner().invoke(app, list(args))
    return result


def test_register_then_submit(live_server, config_dir, run_dir):
    site = new_site("CLI site", "DE", register_key=False)
    out = cli("register", "--server", live_server.url, "--token", site.token)
    assert out.exit_code == 0, out.output
    key = keys.load_private_key(config_dir / keys.PRIVATE_FILE)
    assert keys.fingerprint(key) in out.output
    assert SiteKey.objects.get(site=site.site).fingerprint == keys.fingerprint(key)
    again = cli("register", "--server", live_server.url, "--token", site.token)
    assert again.exit_code == 0 and "already registered" in again.output

    run = run_dir()
    out = cli("submit", str(run), "--server", live_server.url, "--token", site.token, "--json", "--timeout", "60")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["status"] == "verified"
    assert data["rank"] == 1
    assert data["reasons"] == []
    # Where it stands, and why a verified result is not official (a smoke run: the open division).
    assert data["standing"]["state"] == "live" and data["rank_all"] == 1
    assert {"validity.preset", "validity.duration"} <= {r["check"] for r in data["not_official_because"]}
    text = cli("submit", str(run), "--server", live_server.url, "--token", site.token, "--timeout", "60").output
    assert "rank:         1 in the open division" in text and "not official because:" in text
    assert "  validity.preset: " in text
    result = Result.objects.get()
    assert data["url"] == f"{live_server.url}/results/{result.pk}"
    report = verify(data["bundle"], pubkey=key.public_key(), require_signature=True)
    assert data["score_ops"] == result.score_ops == report["score_ops"]

    # Submitting the same run again uploads the same bundle and gets the same submission.
    again = cli("submit", str(run), "--server", live_server.url, "--token", site.token, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["submission"] == data["submission"]
    assert Submission.objects.count() == 1

    # The result page the URL names answers.
    import httpx

    page = httpx.get(data["url"])
    assert page.status_code == 200 and site.site.name in page.text


def test_submit_refused_says_which_check(live_server, config_dir, run_dir):
    site = new_site("Unregistered", "FR", register_key=False)
    out = cli("submit", str(run_dir()), "--server", live_server.url, "--token", site.token, "--json")
    assert out.exit_code == 1
    data = json.loads(out.stdout)
    assert data["status"] == "refused"
    assert data["reasons"][0]["check"] == "unknown_key"
    assert data["score_ops"] is None and data["rank"] is None and data["url"] is None


def test_submit_rejected_by_the_pipeline(live_server, config_dir, run_dir):
    site = new_site("Optimist", "JP", register_key=False)
    assert cli("register", "--server", live_server.url, "--token", site.token).exit_code == 0
    from tests.service.test_rejections import slow_system

    out = cli("submit", str(run_dir(system_id=slow_system(site), declared_peak=None)), "--server", live_server.url, "--token", site.token)
    assert out.exit_code == 1
    assert "rejected" in out.stdout and "plausibility.score_peak" in out.stdout


def test_bad_token(live_server, config_dir):
    out = cli("register", "--server", live_server.url, "--token", "wrong")
    assert out.exit_code == 1
    assert "401" in out.output or "token" in out.output


def test_unreachable_server_is_retried_then_fails(config_dir, run_dir):
    out = cli("submit", str(run_dir()), "--server", "http://127.0.0.1:9", "--token", "t", "--retries", "1",
              "--json")
    assert out.exit_code == 1
    data = json.loads(out.stdout)
    assert data["reasons"][0]["check"] == "network"
