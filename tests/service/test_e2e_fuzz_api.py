"""schemathesis against /api/schema/ on the real service: gunicorn, PostgreSQL, a Celery worker.

Two runs of the schemathesis CLI (pinned in requirements-dev.txt) with a bounded number of examples
per operation (AIPERF_FUZZ_EXAMPLES, 6) and a fixed seed (AIPERF_FUZZ_SEED); the checks are
not_a_server_error and response_schema_conformance, plus the database compared before and after:

- without a token (phases examples, fuzzing, stateful): no 5xx, every answer valid against the schema,
  and no row of the database changed;
- with site B's token (every phase: examples, coverage, fuzzing, stateful where the schema's links
  allow): the same, and nothing of site A's (keys, systems, runs, submissions, results) changed.

Then site B tries each of site A's objects by id.

Last, schemathesis' stateful testing in-process (tests/service/stateful.py): AIPERF_STATEFUL_SCENARIOS
(20) scenarios of at most AIPERF_STATEFUL_STEPS (15) requests chained along the schema's OpenAPI links
(leaderboard/api/links.py: create a system -> read it -> ask a run token for it -> send a heartbeat;
list -> item; a key -> revoke it), once without a token (every write refused, the database unchanged)
and once with site D's token (every object a write answers is D's; site A's rows unchanged).

The number of cases, scenarios and steps of each run is printed (pytest -s) and written to
test-artifacts/schemathesis-*.txt. About 3-4 min with the stack on 2 shared cores (the coverage
phase, ~1,800 cases, and the stateful run with a token, ~500 steps, are most of it).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from collections import Counter

import httpx
import pytest
from aiperf_runner.spec import witness as spec_witness

from devdata.runfactory import make_run
from tests.helpers import REPO
from tests.service.stack import BIN, Stack, witnessed_stack
from tests.service.stateful import Counts, run_stateful

pytestmark = [pytest.mark.services, pytest.mark.slow]

EXAMPLES = int(os.environ.get("AIPERF_FUZZ_EXAMPLES", "6"))  # per operation and phase
SEED = os.environ.get("AIPERF_FUZZ_SEED", "15")
SCENARIOS = int(os.environ.get("AIPERF_STATEFUL_SCENARIOS", "20"))  # per stateful run
STEPS = int(os.environ.get("AIPERF_STATEFUL_STEPS", "15"))  # at most, per scenario
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
                         env={**os.environ, "NO_COLOR": "1", "COLUMNS": "120",
                              "SCHEMATHESIS_HOOKS": "tests.service.schemathesis_hooks",
                              "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
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
                 "work": 1.0, "epochs": 0, "previous_receipt": None}
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


def refuses_writes(ctx, response, case) -> None:
    """Without a token every write is refused (schemathesis check)."""
    if case.method.upper() != "GET" and response.status_code < 400:
        raise AssertionError(f"{case.method} {case.formatted_path} answered {response.status_code} without a token")


def own_objects_only(site: int):
    """A write that succeeds answers an object of the writing site, never another's (schemathesis check)."""
    def check(ctx, response, case) -> None:
        if case.method.upper() == "GET" or response.status_code >= 300:
            return
        try:
            body = response.json()
        except ValueError:  # ?format=csv: the same object as CSV, with no site id to compare
            return
        owner = body.get("site") if isinstance(body, dict) else None
        if isinstance(owner, dict) and owner.get("id") != site:
            raise AssertionError(f"{case.method} {case.formatted_path} answered {response.status_code} with an object "
                                 f"of site {owner.get('id')}, not of the writing site {site}")
    return check


def stateful(stack: Stack, name: str, headers: dict[str, str], checks: list, scenarios: int = SCENARIOS) -> Counts:
    counts = run_stateful(f"{stack.url}/api/schema/", headers, scenarios=scenarios, steps=STEPS, checks=checks)
    ARTIFACTS.mkdir(exist_ok=True)
    lines = [counts.summary(name), *(f"  {k}: {n}" for k, n in sorted(counts.statuses.items())),
             *(f"  link {k}: {n}" for k, n in sorted(counts.links.items())),
             *(f"  link answer {k}: {n}" for k, n in sorted(counts.link_statuses.items()))]
    (ARTIFACTS / f"schemathesis-stateful-{name}.txt").write_text("\n".join(lines) + "\n")
    print(lines[0], file=sys.stderr)
    return counts


def test_stateful_without_a_token_changes_nothing(stack, site_a):
    before = snapshot(stack)
    counts = stateful(stack, "anonymous", {}, [refuses_writes])
    assert counts.scenarios >= SCENARIOS and counts.steps > SCENARIOS
    assert sum(counts.links.values()) > 0, counts.statuses  # list -> item links at least
    assert snapshot(stack) == before


def test_stateful_with_a_token_touches_no_other_site(stack, site_a):
    token_b, _ = stack.new_site("Fuzz Delta", "ES")
    site_b = stack.sql("SELECT id FROM leaderboard_site WHERE name = %s", "Fuzz Delta")[0][0]
    before = snapshot(stack, site_a["site"])
    walk = functools.partial(stateful, stack, headers={"Authorization": f"Token {token_b}"},
                             checks=[own_objects_only(site_b)])
    counts = walk("site-token")
    assert counts.scenarios >= SCENARIOS and counts.steps > SCENARIOS
    # Which links a walk takes and which bodies it draws depend on what the shared service already holds (the
    # module's other tests), not only on the seed: while the walks so far missed the chain below, it goes on, at
    # most four times more, for twice the scenarios each, and the chain must be in their union. (Three walks missed
    # it twice in CI, on the state the stack stream's earlier tests left: each run token asked was refused 401.)
    walks = [counts]
    while not chain_walked(walks) and len(walks) < 5:
        walks.append(walk(f"site-token-again-{len(walks)}", scenarios=2 * SCENARIOS))
    links = sum((w.links for w in walks), Counter())
    link_statuses = sum((w.link_statuses for w in walks), Counter())
    # The chain the links describe was walked: a system created, read back (itself or its site: which of
    # the two the machine picks follows the server's answers, not only the seed), a run token asked for a
    # system (straight from its creation, or from reading it back: the machine's choice again).
    assert made_then_read(links) > 0, links
    assert tokens_asked(links), links
    # A run token asked along the link from a system just made finds it: a token (201), or a refusal of the body
    # the fuzzer drew (400, naming the field), never "no such system" (a system read from the list may be another
    # site's: 404 there is right).
    made = {k: n for k, n in link_statuses.items() if k.startswith("POST /api/v1/systems/ -> [201] RequestRun")}
    assert not [k for k in made if not k.endswith((" 201", " 400"))], link_statuses
    assert sum(w.statuses["POST /api/v1/runs/ 201"] for w in walks) > 0, link_statuses
    assert snapshot(stack, site_a["site"]) == before


def made_then_read(links: Counter) -> int:
    followed = {name.split("] ")[-1].split(" -> ")[0]: n for name, n in links.items()
                if name.startswith("POST /api/v1/systems/ -> [201]")}
    return followed.get("GetSystem", 0) + followed.get("GetSystemSite", 0)


def tokens_asked(links: Counter) -> int:
    # From a system just made, read back, or the first row of the systems list (a walk may ask its tokens only
    # from there): each is a run token asked for a system along the schema's links.
    return sum(n for name, n in links.items() if "RequestRunToken" in name)


def chain_walked(walks: list[Counts]) -> bool:
    links = sum((w.links for w in walks), Counter())
    return bool(made_then_read(links) and tokens_asked(links)
                and sum(w.statuses["POST /api/v1/runs/ 201"] for w in walks))
