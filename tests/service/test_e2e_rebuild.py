"""`manage.py aiperf_rebuild --check` on PostgreSQL: the end-to-end results, and a stored run of every released
spec and rules version (tests/fixtures/runs/), rebuilt from their bundles with zero differences (demo results and
refused uploads, which keep no bundle, skipped), and a stored figure changed behind the service's back found.
About 50 s (a stack, seven verified uploads, three rebuilds)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from aiperf_runner.spec.rules import RULES_VERSION

from devdata.runfactory import make_run
from tests.helpers import REPO
from tests.service.stack import BIN, Stack, witnessed_stack

pytestmark = [pytest.mark.services, pytest.mark.slow]

STORED = REPO / "tests" / "fixtures" / "runs"
STORED_RUNS = sorted(p.name for p in STORED.iterdir() if (p / "expected.json").exists())


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with witnessed_stack(tmp_path_factory.mktemp("rebuild")) as s:
        yield s


def rebuild(stack: Stack, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "aiperf_rebuild", "--check", *args], cwd=REPO,
                          env=stack.env, capture_output=True, text=True, timeout=300)


def rebuilt_without_differences(stack: Stack) -> dict:
    """`aiperf_rebuild --check --json` over every stored bundle (the end-to-end tests' own results, run
    after them): zero differences, and each stored bundle re-verified. Returns the report (printed)."""
    with_bundle = stack.sql("SELECT count(*) FROM leaderboard_submission WHERE bundle <> ''")[0][0]
    out = rebuild(stack, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    print(f"aiperf_rebuild --check: {report['reverified']} re-verified ({with_bundle} stored bundles), "
          f"{report['compared']} compared, {len(report['differ'])} differ", file=sys.stderr)
    assert report["differ"] == [] and report["reverified"] == with_bundle, report
    return report


def scratch_databases(stack: Stack) -> list[str]:
    return [r[0] for r in stack.sql("SELECT datname FROM pg_database WHERE datname LIKE 'aiperf_rebuild_%%'")]


def submit_stored_run(stack: Stack, token: str, name: str) -> dict:
    """Upload a stored run of tests/fixtures/runs/ (signed by its own key, registered first) and wait for it."""
    auth = {"Authorization": f"Token {token}"}
    key = (STORED / name / "site_key.pub").read_text()
    r = httpx.post(f"{stack.url}/api/v1/keys/", json={"public_key": key, "label": name}, headers=auth, timeout=30)
    assert r.status_code in (200, 201), r.text
    with open(STORED / name / "run.tar.gz", "rb") as fh:
        r = httpx.post(f"{stack.url}/api/v1/submissions/", files={"bundle": ("run.tar.gz", fh)}, headers=auth,
                       timeout=60)
    assert r.status_code in (200, 201, 202), r.text
    url = f"{stack.url}/api/v1/submissions/{r.json()['id']}/"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        sub = httpx.get(url, headers=auth, timeout=30).json()
        if sub["status"] not in ("received", "verifying"):
            return sub
        time.sleep(0.5)
    raise AssertionError(f"{name}: still {sub['status']}")


def test_rebuilt_results_equal_the_stored_ones(stack, tmp_path):
    # Beta's epochs repeat Alpha's (same timings): refused as a duplicate (a refused bundle is not kept, so
    # there is nothing to rebuild it from; it must not disturb the others).
    for name, epoch_s, status in (("Rebuild Alpha", 10.0, "verified"), ("Rebuild Beta", 10.0, "rejected"),
                                  ("Rebuild Gamma", 5.0, "verified")):
        token, config = stack.new_site(name, "DE")
        make_run(tmp_path / name, slots=2, trials=5, epoch_seconds=epoch_s, seed=len(name))
        sub = stack.submit(tmp_path / name, token, config)
        assert sub["status"] == status, json.dumps(sub)[:1500]
    # A stored run of every released spec and rules version, each verified under the rules it declares; only
    # the service's own version is admitted to the official ranking.
    token = stack.manage("aiperf_site", "create", "Versions Lab", "--country", "FR").stdout.strip()
    for name in STORED_RUNS:
        sub = submit_stored_run(stack, token, name)
        assert sub["status"] == "verified", json.dumps(sub)[:1500]
        expected = json.loads((STORED / name / "expected.json").read_text())["report"]
        (version, spec, score, admitted), = stack.sql(
            "SELECT r.rules_version, r.spec_version, r.score_ops, c->>'passed' FROM leaderboard_result r, "
            "jsonb_array_elements(r.report->'checks') c WHERE r.submission_id = %s AND c->>'name' = "
            "'validity.admitted'", sub["id"])
        assert (spec, score) == (("2" if name.startswith("spec2") else "1"), expected["score_ops"]), name
        assert version == (expected["rules_version"] if name != "spec1-rules3.1" else "3.0"), name
        assert admitted == ("true" if version == RULES_VERSION else "false"), name
    stack.manage("aiperf_demo_data", "--results", "6")  # generated results: no bundle to rebuild from
    before = scratch_databases(stack)
    out = rebuild(stack, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    print(f"aiperf_rebuild --check: {report['reverified']} re-verified, {report['skipped_without_bundle']} skipped, "
          f"{len(report['differ'])} differ")
    runs = 2 + len(STORED_RUNS)
    assert report["reverified"] == runs and report["compared"] == runs and report["differ"] == []
    assert report["skipped_without_bundle"] >= 7
    assert scratch_databases(stack) == before  # the scratch database is dropped


def check_list(stack: Stack, reader: Path) -> tuple[int, dict]:
    """`aiperf-runner check-list --json` as a reader on another machine (its own config directory)."""
    out = subprocess.run([str(BIN / "aiperf-runner"), "check-list", "--server", stack.url, "--json"], cwd=REPO,
                         env={**stack.env, "AIPERF_CONFIG_DIR": str(reader)}, capture_output=True, text=True,
                         timeout=300)
    return out.returncode, json.loads(out.stdout)


def test_a_result_changed_behind_the_services_back_is_found(stack, tmp_path):
    """By the rebuild (the bundle says otherwise; the list's log too) and by a reader's check-list (the list is
    not what the log says): a score doubled by SQL, then a result deleted without an entry."""
    reader = tmp_path / "reader"
    code, verdict = check_list(stack, reader)
    assert code == 0 and verdict["consistent"] and verdict["listed"] >= 2, verdict
    result = stack.sql("SELECT id, submission_id FROM leaderboard_result WHERE submission_id IN "
                       "(SELECT id FROM leaderboard_submission WHERE bundle <> '') ORDER BY id LIMIT 1")[0]
    stack.sql("UPDATE leaderboard_result SET score_ops = score_ops * 2 WHERE id = %s RETURNING id", result[0])
    stack.manage("aiperf_rerank")  # ranks and cached pages follow the database: the list shows the new score
    out = rebuild(stack)
    assert out.returncode != 0
    assert f"submission {result[1]} " in out.stdout and "score_ops" in out.stdout, out.stdout + out.stderr
    assert f"1 of {2 + len(STORED_RUNS)} result(s) differ" in out.stdout + out.stderr
    assert f"not in the list's log: result {result[0]}: score_ops" in out.stdout, out.stdout
    code, verdict = check_list(stack, reader)
    assert code == 1 and any(p.startswith(f"result {result[0]}: score_ops is ") for p in verdict["problems"]), verdict

    # A live result no frozen edition cites (those are protected from deletion).
    demo = stack.sql("SELECT id FROM leaderboard_result WHERE rank_all IS NOT NULL AND id <> %s AND id NOT IN "
                     "(SELECT result_id FROM leaderboard_editionentry) ORDER BY id LIMIT 1", result[0])[0][0]
    stack.manage("shell", "-c", f"from leaderboard.models import Result; Result.objects.filter(pk={demo}).delete()")
    stack.manage("aiperf_rerank")
    code, verdict = check_list(stack, reader)
    assert code == 1 and f"result {demo} is listed by the log but not on the list (removed or hidden without a log " \
                         "entry)" in verdict["problems"], verdict
    assert f"result {demo}: in the log, deleted from the database without an entry" in rebuild(stack).stdout
