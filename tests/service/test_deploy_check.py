"""`manage.py check --deploy` is clean with the production environment of docs/service.md, and says
what is missing without it (about 10 s: three settings loads in subprocesses)."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys

from tests.helpers import REPO

DOC = REPO / "docs" / "service.md"


def production_env() -> dict[str, str]:
    """The variables of the "Production environment" block of docs/service.md."""
    text = DOC.read_text()
    block = text[text.index("### Production environment"):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    env = {}
    for line in block.splitlines():
        found = re.match(r"^([A-Z_]+)=(.*)$", line.strip())
        if found:
            env[found.group(1)] = found.group(2)
    return env


def check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "server.settings", **env}
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=REPO,
                          env=clean, capture_output=True, text=True, timeout=120)


def test_documented_production_environment_is_clean():
    env = production_env()
    assert {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "ALLOWED_HOSTS"} <= env.keys()
    env["SECRET_KEY"] = secrets.token_urlsafe(50)  # the document shows how to make one
    out = check_deploy(env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues" in out.stdout


def test_without_a_redis_cache_the_check_warns():
    env = production_env()
    env["SECRET_KEY"] = secrets.token_urlsafe(50)
    env.pop("CACHE_URL")
    out = check_deploy(env)
    assert out.returncode != 0 and "aiperf.W001" in out.stderr, out.stderr


def test_hsts_turned_off_is_reported():
    env = {**production_env(), "SECRET_KEY": secrets.token_urlsafe(50), "SECURE_HSTS_SECONDS": "0"}
    out = check_deploy(env)
    assert out.returncode != 0 and "security.W004" in out.stderr, out.stderr
