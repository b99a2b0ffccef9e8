"""/healthz, /readyz, and settings read from the environment."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO


def test_healthz(client):
    resp = client.get("/healthz")
    assert resp.status_code == 200 and resp.json()["status"] == "ok"


def test_readyz_checks_database_and_broker(client, db):
    body = client.get("/readyz").json()
    assert body["status"] == "ok"
    assert body["checks"] == {"database": "ok", "broker": "ok"}
    assert body["broker"] == "in-process"


def test_readyz_reports_an_unreachable_broker(client, db, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"
    from server.celery import app

    app.conf.broker_url = settings.CELERY_BROKER_URL
    try:
        resp = client.get("/readyz")
    finally:
        app.conf.broker_url = None
    assert resp.status_code == 503
    assert resp.json()["checks"]["broker"] != "ok"


def _settings(env: dict[str, str], code: str = "print('ok')") -> subprocess.CompletedProcess:
    clean = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "server.settings", **env}
    return subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=REPO, env=clean,
                          capture_output=True, text=True)


def test_secret_key_required_when_debug_is_off():
    out = _settings({"DEBUG": "0"})
    assert out.returncode != 0 and "SECRET_KEY must be set" in out.stderr
    assert _settings({"DEBUG": "0", "SECRET_KEY": "s" * 50}).returncode == 0


def test_embedded_defaults_and_database_url():
    code = ("from django.conf import settings as s; "
            "print(s.DATABASES['default']['ENGINE'], s.CELERY_TASK_ALWAYS_EAGER, s.DEBUG, s.TIME_ZONE)")
    out = _settings({}, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["django.db.backends.sqlite3", "True", "True", "UTC"]
    out = _settings({"DATABASE_URL": "postgres://u@127.0.0.1:5432/x", "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
                     "SECRET_KEY": "k" * 50}, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["django.db.backends.postgresql", "False", "False", "UTC"]
    code = "from django.conf import settings as s; print(s.AIPERF_MAX_UPLOAD_BYTES, s.AIPERF_REQUIRE_APPROVAL)"
    out = _settings({"AIPERF_MAX_UPLOAD_BYTES": "1234", "AIPERF_REQUIRE_APPROVAL": "1"}, code)
    assert out.stdout.split() == ["1234", "True"]


def test_celery_settings_for_safe_redelivery():
    from server.celery import app

    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1
    assert "leaderboard.tasks.verify_submission" in app.tasks
    assert {e["task"] for e in app.conf.beat_schedule.values()} == {"leaderboard.tasks.reverify_stale",
                                                                     "leaderboard.tasks.resume_stuck",
                                                                     "leaderboard.tasks.expire_challenges",
                                                                     "leaderboard.tasks.freeze_due_editions"}


def test_server_timing_is_wired_by_its_setting():
    code = "from django.conf import settings as s; print(s.MIDDLEWARE[0])"
    assert _settings({"AIPERF_SERVER_TIMING": "1"}, code).stdout.strip() == "server.timing.ServerTimingMiddleware"
    assert _settings({}, code).stdout.strip() != "server.timing.ServerTimingMiddleware"
