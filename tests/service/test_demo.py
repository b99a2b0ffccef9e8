"""`make demo` (scripts/demo.py): a real smoke run submitted to a local embedded-mode service."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

from tests.helpers import REPO
from tests.service.stack import free_port

pytestmark = pytest.mark.slow


def test_demo_end_to_end(tmp_path):
    home = tmp_path / "demo"
    env = {**os.environ, "AIPERF_DEMO_HOME": str(home), "AIPERF_DEMO_DURATION": "30s",
           "AIPERF_DEMO_PORT": str(free_port())}
    for name in ("DATABASE_URL", "CELERY_BROKER_URL"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, "scripts/demo.py"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=600)
    pid = None
    if (home / "demo-server.pid").exists():
        pid = int((home / "demo-server.pid").read_text().split()[0])
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "status:      verified" in out.stdout
        url = next(line.split()[-1] for line in out.stdout.splitlines() if line.startswith("result:"))
        assert httpx.get(url).status_code == 200
        assert f"kill {pid}" in out.stdout
        # The demo's result rebuilt from its bundle into a scratch SQLite database: no difference.
        rebuilt = subprocess.run([sys.executable, "manage.py", "aiperf_rebuild", "--check", "--json"], cwd=REPO,
                                 env={**env, "DATABASE_URL": f"sqlite:///{home / 'aiperf.sqlite3'}",
                                      "MEDIA_ROOT": str(home / "media"), "DEBUG": "1"},
                                 capture_output=True, text=True, timeout=300)
        assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
        report = json.loads(rebuilt.stdout)
        assert report["reverified"] >= 1 and report["differ"] == [], report
        # AIPERF_DEMO_WORKLOAD=llm: an AIPerf-LLM run submitted to the same service, on its own list.
        llm = subprocess.run([sys.executable, "scripts/demo.py"], cwd=REPO, capture_output=True, text=True,
                             env={**env, "AIPERF_DEMO_WORKLOAD": "llm"}, timeout=600)
        assert llm.returncode == 0, llm.stdout + llm.stderr
        assert "witnessed AIPerf-LLM run (llm-smoke)" in llm.stdout and "status:      verified" in llm.stdout
        listed = next(line.split()[-1] for line in llm.stdout.splitlines() if line.startswith("ranked list:"))
        assert "workload=llm" in listed
        llm_url = next(line.split()[-1] for line in llm.stdout.splitlines() if line.startswith("result:"))
        llm_id = llm_url.rstrip("/").rsplit("/", 1)[-1]
        page = httpx.get(listed).text
        assert f'data-result="{llm_id}"' in page and f'data-result="{url.rstrip("/").rsplit("/", 1)[-1]}"' not in page
        # open for its preset, which no check measures: the demo, the API and the result page say so
        because = next(line for line in llm.stdout.splitlines() if line.startswith("not official:"))
        assert "validity.preset" in because and "(the demo is a short AIPerf-LLM run (llm-smoke)" in because
        result_page = httpx.get(llm_url).text
        assert "In the open division: preset &#x27;llm-smoke&#x27;: only &#x27;llm-kjv&#x27; is official" in result_page
        assert "reach the logged validation losses" in result_page and "Best validation loss" in result_page
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
