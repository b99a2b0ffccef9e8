"""schemathesis against /api/schema/ on the real service: gunicorn, PostgreSQL, a Celery worker.

Two runs of the schemathesis CLI (pinned in requirements-dev.txt) with a bounded number of examples
per operation (AIPERF_FUZZ_EXAMPLES, 6) and a fixed seed (AIPERF_FUZZ_SEED); the checks are
not_a_server_error and response_schema_conformance, plus the database compared before and after:

- without a token (phases examples, fuzzing, stateful): no 5xx, every answer valid against the schema,
  and no row of the database changed;
- with site B's token (every phase: examples, coverage, fuzzing, stateful where the schema's links
  allow): the same, and nothing of site A's (keys, systems, runs, submissions, results) changed.

Then site B tries each of site A's objects by id. The number of cases each run made is printed and
written to test-artifacts/schemathesis-*.txt. About 60 s with the stack on 2 idle cores (the coverage
phase, ~1,800 cases, is most of it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import httpx
import pytest
from aiperf_runner.spec import witness as spec_witness

from devdata.runfactory import make_run
from tests.helpers import REPO
from tests.service.stack import BIN, Stack, witnessed_stack

pytestmark = [pytest.mark.services, pytest.mark.slow]

EXAMPLES = int(os.environ.get("AIPERF_FUZZ_EXAMPLES", "6"))  # per operation and phase
SEED = os.environ.get("AIPERF_FUZZ_SEED", "15")
ARTIFACTS = REPO / "test-artifacts"
TABLES = [f"leaderboard_{m}" for m in ("site", "sitekey", "system", "acceleratorpeak", "witnesskey", "runattempt",
                                        "heartbeat", "submission", "result", "evidence", "epochfingerprint",
                                        "resultseries", "trial", "edition", "editionentry")]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    # The fuzzer's writes must reach the views, not the limits (those have tests of their own).
    with witnessed_stack(tmp_path_factory.mktemp("fuzz"), AIPERF_WRITE_RATE="100000/min",
                         AIPERF_UPLOADS_PER_DAY="100000", AIPERF_UPLOAD_CONCURRENCY="8") as s:
        yield s


def post(stack: Stack, path: str, token: str, **kwargs) -> httpx.Response:
    return httpx.post(f"{stack.url}{path}", headers={"Authorization": f"Token {token}"}, timeout=60, **kwargs)


@pytest.fixture(scope="module")
def site_a(stack, tmp_path_factory) -> dict:
    """Site A with a key, a registered system, a run token and a verified submission."""
    token, config = stack.new_site("Fuzz Alpha", "DE")
    run = tmp_path_factory.mktemp("run-a") / "run"
    make_run(run, slots=2, trials=4, seed=5)
    sub = stack.submit(run, token, config)
    assert sub.get("status") == "verified", sub
    system = post(stack, "/api/v1/systems/", token, json={
        "name": "alpha-cluster", "accelerator_model": "cpu", "accelerators_per_node": 0, "nodes": 1,
        "cpu_cores": 4}).json()
    attempt = post(stack, "/api/v1/runs/", token, json={
        "system": system["id"], "preset": "smoke", "rules": "v2", "precision": "fp32", "slots": 1,
        "devices_per_slot": 1, "duration_s": 60, "runner_version": "2.0.0"})
    assert attempt.status_code == 201, attempt.text
    site = stack.sql("SELECT id FROM leaderboard_site WHERE name = %s", "Fuzz Alpha")[0][0]
    key = stack.sql("SELECT id FROM leaderboard_sitekey WHERE site_id = %s", site)[0][0]
    return {"token": token, "submission": stack.sql("SELECT id FROM leaderboard_submission WHERE site_id = %s", site)[0][0], "system": system["id"], "run_id": attempt.json()["run_id"],
            "key": key, "site": site}


def snapshot(stack: Stack, site: int | None = None) -> dict[str, list[tuple]]:
    """Every row of the service's tables (or those of one site), as text."""
    where = {"leaderboard_site": "id", "leaderboard_sitekey": "site_id", "leaderboard_system": "site_id",
             "leaderboard_submission": "site_id", "leaderboard_result": "site_id",
             "leaderboard_runattempt": "site_id"}
    out = {}
    for table in TABLES:
        if site is not None and table not in where:
            continue
        cond = f" WHERE {where[table]} = %s" if site is not None else ""
        out[table] = stack.sql(f"SELECT t::text FROM {table} t{cond} ORDER BY 1", *([site] if site else []))
    return out


def fuzz(stack: Stack, name: str, *headers: str, phases: str = "examples,coverage,fuzzing,stateful") -> int:
    """One schemathesis run; returns the number of cases it made (fails on any failure it found)."""
    argv = [str(BIN / "schemathesis"), "run", f"{stack.url}/api/schema/", "--max-examples", str(EXAMPLES),
            "--phases", phases,
            "--seed", SEED, "--checks", "not_a_server_error,response_schema_conformance", "--no-shrink",
            "--request-timeout", "30", "--suppress-health-check", "all"]
    for header in headers:
        argv += ["--header", header]
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "NO_COLOR": "1", "COLUMNS": "120"})
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"schemathesis-{name}.txt").write_text(out.stdout + out.stderr)
    cases = re.search(r"(\d+) generated", out.stdout)
    assert cases, out.stdout[-3000:] + out.stderr[-3000:]
    print(f"schemathesis {name}: {cases.group(1)} cases, rc {out.returncode}", file=sys.stderr)
    assert out.returncode == 0, out.stdout[-6000:] + "\n" + stack.log("web")[-2000:]
    return int(cases.group(1))


def test_fuzzed_without_a_token_changes_nothing(stack, site_a):
    before = snapshot(stack)
    # Without the coverage phase (its ~1,500 boundary cases run with the token below): reads and refused writes.
    cases = fuzz(stack, "anonymous", phases="examples,fuzzing,stateful")
    assert cases > 100
    assert snapshot(stack) == before  # no write without a token


def test_fuzzed_with_a_token_touches_no_other_site(stack, site_a, tmp_path):
    token_b, _ = stack.new_site("Fuzz Beta", "FR")
    before = snapshot(stack, site_a["site"])
    cases = fuzz(stack, "site-token", f"Authorization: Token {token_b}")
    assert cases > 500
    assert snapshot(stack, site_a["site"]) == before


def test_a_site_cannot_reach_another_sites_objects(stack, site_a):
    token_b, config_b = stack.new_site("Fuzz Gamma", "IT")
    before = snapshot(stack, site_a["site"])
    assert post(stack, f"/api/v1/keys/{site_a['key']}/revoke/", token_b).status_code == 403
    evidence = post(stack, f"/api/v1/submissions/{site_a['submission']}/evidence/", token_b,
                    data={"trial": "0"}, files={"weights": ("w.safetensors", b"x")})
    assert evidence.status_code == 403
    statement = {"kind": spec_witness.HEARTBEAT_KIND, "heartbeat_seq": 0, "head": "0" * 64, "log_id": "0" * 64,
                 "work": 1.0, "epochs": 0}
    beat = post(stack, f"/api/v1/runs/{site_a['run_id']}/heartbeats/", token_b,
                json={"statement": statement, "signature": "AA=="})
    assert beat.status_code == 404 and beat.json()["check"] == "run"
    receipts = httpx.get(f"{stack.url}/api/v1/runs/{site_a['run_id']}/receipts/",
                         headers={"Authorization": f"Token {token_b}"}, timeout=30)
    assert receipts.status_code == 404
    # A's system cannot be used for B's run token; A's public key cannot be registered to B.
    run = post(stack, "/api/v1/runs/", token_b, json={
        "system": site_a["system"], "preset": "smoke", "rules": "v2", "precision": "fp32", "slots": 1,
        "devices_per_slot": 1, "duration_s": 60, "runner_version": "2.0.0"})
    assert run.status_code == 404 and run.json()["check"] == "system"
    a_key = stack.sql("SELECT public_key FROM leaderboard_sitekey WHERE id = %s", site_a["key"])[0][0]
    assert post(stack, "/api/v1/keys/", token_b, json={"public_key": a_key}).status_code == 409
    assert snapshot(stack, site_a["site"]) == before
