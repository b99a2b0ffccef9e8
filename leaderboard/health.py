"""/healthz (the process answers) and /readyz (the database and the broker answer)."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import JsonResponse

from server.celery import app


def healthz(request):
    return JsonResponse({"status": "ok"})


def _database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        return f"{type(exc).__name__}: {exc}"
    return None


def _broker() -> str | None:
    if not settings.CELERY_BROKER_URL:
        return None  # embedded mode: tasks run in-process
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return None


def readyz(request):
    checks = {"database": _database(), "broker": _broker()}
    ready = all(v is None for v in checks.values())
    body = {
        "status": "ok" if ready else "unavailable",
        "checks": {k: ("ok" if v is None else v) for k, v in checks.items()},
        "broker": "celery" if settings.CELERY_BROKER_URL else "in-process",
    }
    return JsonResponse(body, status=200 if ready else 503)
