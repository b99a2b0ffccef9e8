"""The list's transparency log (docs/service.md, "The list's log"): each change to the public list is an
entry with a signed head; the API's proofs verify with a few lines written here from RFC 9162 (not the
project's code); `aiperf-runner check-list` finds the list consistent, then catches a score changed and
a result deleted behind the log's back, and a log rewritten under it."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from aiperf_runner.client import listlog
from aiperf_runner.spec import keys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.db import transaction

from leaderboard import pipeline, ranking, translog
from leaderboard.models import Edition, LogEntry, LogNode, Result, Submission, TreeHead
from tests.service.conftest import upload

pytestmark = pytest.mark.django_db(transaction=True)


def H(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def rfc_inclusion_root(index: int, size: int, leaf: bytes, path: list[bytes]) -> bytes:
    """RFC 9162 2.1.3.2, steps 2-4: the root an inclusion path leads to."""
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if fn % 2 == 1 or fn == sn:
            r = H(b"\x01" + p + r)
            while fn % 2 == 0 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = H(b"\x01" + r + p)
        fn, sn = fn >> 1, sn >> 1
    assert sn == 0
    return r


def signed(head: dict, key: dict) -> bool:
    statement = {k: head[k] for k in ("kind", "size", "root", "timestamp", "key")}
    data = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    try:
        Ed25519PublicKey.from_public_bytes(base64.b64decode(key["public_key"])).verify(
            base64.b64decode(head["signature"]), data)
    except Exception:  # noqa: BLE001 - InvalidSignature
        return False
    return True


def events(result_id: int) -> list[str]:
    return [json.loads(d)["event"] for d in LogEntry.objects.filter(result_id=result_id).values_list("data", flat=True)]


def test_every_change_is_an_entry_under_a_signed_head(site_a, make_bundle, client) -> None:
    body = upload(site_a.client, make_bundle(site_a.key)).json()
    result = Result.objects.get(pk=body["result"])
    sub = Submission.objects.get(pk=body["id"])
    assert events(result.pk) == ["accepted"]
    pipeline.withdraw(sub, by="mia", reason="the site asked")
    pipeline.publish(sub, by="mia")  # withdrawn stays withdrawn: nothing changes, no entry
    assert events(result.pk) == ["accepted", "withdrawn"]
    withdrawn = json.loads(LogEntry.objects.get(result_id=result.pk, index=1).data)
    assert (withdrawn["by"], withdrawn["reason"], withdrawn["result"]["live"]) == ("mia", "the site asked", False)
    edition = Edition.objects.create(name="2026-12")
    with transaction.atomic():
        ranking.freeze_edition(edition)
    assert json.loads(LogEntry.objects.last().data)["edition"]["name"] == "2026-12"

    key = client.get("/api/v1/log/key/").json()
    head = client.get("/api/v1/log/head/").json()
    assert head["size"] == 3 and signed(head, key) and key["fingerprint"] == head["key"]
    assert not signed({**head, "root": "00" * 32}, key)
    assert list(TreeHead.objects.values_list("size", flat=True)) == [3, 2, 1]  # every head kept

    entries = client.get("/api/v1/log/entries/?start=0").json()["entries"]
    leaves = [H(b"\x00" + e["data"].encode()) for e in entries]
    assert [x.hex() for x in leaves] == [e["leaf_hash"] for e in entries]
    proof = client.get(f"/api/v1/results/{result.pk}/proof/").json()
    assert [e["entry"]["event"] for e in proof["entries"]] == ["accepted", "withdrawn"]
    for e in proof["entries"]:
        leaf = H(b"\x00" + e["data"].encode())
        root = rfc_inclusion_root(e["index"], proof["head"]["size"], leaf, [bytes.fromhex(p) for p in e["inclusion"]])
        assert root.hex() == proof["head"]["root"]
    assert client.get("/api/v1/results/99999/proof/").status_code == 404

    consistency = client.get("/api/v1/log/consistency/?first=1&second=3").json()
    # RFC 9162 2.1.4: the tree of 1 is leaf 0; the proof's hashes rebuild both roots.
    p = [bytes.fromhex(x) for x in consistency["proof"]]
    assert consistency["first_root"] == leaves[0].hex()
    assert H(b"\x01" + H(b"\x01" + leaves[0] + p[0]) + p[1]).hex() == consistency["second_root"] == head["root"]
    assert client.get("/api/v1/log/consistency/?first=4&second=3").status_code == 400


def test_a_reverification_that_changes_nothing_adds_nothing(site_a, make_bundle) -> None:
    body = upload(site_a.client, make_bundle(site_a.key)).json()
    pipeline.run(body["id"], reverify=True)
    assert events(body["result"]) == ["accepted"]


@pytest.fixture
def config(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("AIPERF_CONFIG_DIR", str(tmp_path / "reader"))
    return tmp_path / "reader"


def test_check_list_catches_changes_behind_the_log(site_a, make_bundle, live_server, config) -> None:
    first = upload(site_a.client, make_bundle(site_a.key)).json()
    second = upload(site_a.client, make_bundle(site_a.key, start=1_764_100_000.0)).json()
    verdict = listlog.check(live_server.url)
    assert verdict.consistent, verdict.problems
    assert verdict.size == 2 and verdict.listed == 2 and verdict.previous_size is None

    sub = Submission.objects.get(pk=first["id"])
    pipeline.withdraw(sub, by="mia", reason="duplicate hardware")
    again = listlog.check(live_server.url)
    assert again.consistent and again.previous_size == 2
    assert [(c["event"], c["result"], c["by"]) for c in again.changes] == [("withdrawn", first["result"], "mia")]

    Result.objects.filter(pk=second["result"]).update(score_ops=1e30)  # a maintainer's direct update
    ranking.rerank()
    changed = listlog.check(live_server.url)
    assert not changed.consistent
    assert any(p.startswith(f"result {second['result']}: score_ops is 1e+30 on the list") for p in changed.problems)

    Result.objects.filter(pk=second["result"]).delete()
    ranking.rerank()
    deleted = listlog.check(live_server.url)
    assert any(f"result {second['result']} is listed by the log but not on the list" in p for p in deleted.problems)


def test_check_list_catches_a_rewritten_log(site_a, make_bundle, live_server, config) -> None:
    upload(site_a.client, make_bundle(site_a.key))
    assert listlog.check(live_server.url).consistent
    # The log rewritten from scratch with other entries (a fork): the head this reader kept is not in it.
    LogEntry.objects.all().delete()
    LogNode.objects.all().delete()
    TreeHead.objects.all().delete()
    translog.append({"event": "note", "at": "2026-12-04T00:00:00+00:00", "by": "", "reason": "rewritten"})
    upload(site_a.client, make_bundle(site_a.key, start=1_764_100_000.0))
    forked = listlog.check(live_server.url)
    assert not forked.consistent
    assert any("rewritten or forked" in p or "removed" in p for p in forked.problems), forked.problems


def test_check_list_refuses_another_log_key(site_a, make_bundle, live_server, config, settings, tmp_path) -> None:
    upload(site_a.client, make_bundle(site_a.key))
    assert listlog.check(live_server.url).consistent
    settings.AIPERF_LOG_KEY_FILE = tmp_path / "another_key.pem"
    replaced = listlog.check(live_server.url)
    assert not replaced.consistent and "the log key is" in replaced.problems[0]
    pinned = keys.fingerprint(keys.generate_key())
    assert "not " + pinned in listlog.check(live_server.url, key=pinned).problems[0]


def test_the_command_line_says_it_and_exits_0_1_2(site_a, make_bundle, live_server, config, monkeypatch) -> None:
    from aiperf_runner.cli import app
    from typer.testing import CliRunner

    monkeypatch.delenv("AIPERF_SERVER", raising=False)
    body = upload(site_a.client, make_bundle(site_a.key)).json()
    cli = CliRunner()
    ok = cli.invoke(app, ["check-list", "--server", live_server.url, "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["consistent"] is True
    pipeline.withdraw(Submission.objects.get(pk=body["id"]), by="mia", reason="asked")
    again = cli.invoke(app, ["check-list", "--server", live_server.url])
    assert again.exit_code == 0 and f"withdrawn result {body['result']} by 'mia' reason 'asked'" in again.stdout
    Result.objects.filter(pk=body["result"]).update(published=True)
    Submission.objects.filter(pk=body["id"]).update(status="published")
    ranking.rerank()
    bad = cli.invoke(app, ["check-list", "--server", live_server.url])
    assert bad.exit_code == 1
    assert f"INCONSISTENT: result {body['result']} is on the list but the log does not list it" in bad.output
    assert cli.invoke(app, ["check-list"]).exit_code == 2  # no server anywhere


def test_a_result_rejected_on_reverification_leaves_the_list_in_the_log(site_a, make_bundle) -> None:
    body = upload(site_a.client, make_bundle(site_a.key)).json()
    sub = Submission.objects.get(pk=body["id"])
    token = pipeline.claim(sub.pk, reverify=True)
    pipeline._store_rejection(sub, token, [{"check": "audit.weights", "message": "the weights are not the graph's"}])
    last = json.loads(LogEntry.objects.last().data)
    assert (last["event"], last["result"], last["reason"]) == (
        "rejected", {"id": body["result"], "removed": True, "live": False}, "the weights are not the graph's")
    assert translog.unlogged() == []


def test_demo_data_is_logged_and_replaced_in_the_log(live_server, config) -> None:
    from devdata import demo

    made = demo.generate(30).results  # 30 and the AIPerf-LLM results that come with them
    assert made == 33 and translog.unlogged() == [] and LogEntry.objects.filter(result_id__isnull=False).count() == made
    assert listlog.check(live_server.url).consistent
    demo.generate(12)  # the old demo results leave the list on the record
    assert translog.unlogged() == []
    verdict = listlog.check(live_server.url)
    assert verdict.consistent, verdict.problems[:3]
    assert sum(c["event"] == "removed" for c in verdict.changes) == made
