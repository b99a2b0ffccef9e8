"""The rejection matrix: each bad upload is refused with the check it failed, and leaves nothing behind.

Checks made while the upload request is answered (bundle, key, signature, manifest, chain, run id,
size) leave no row and no file. A check that needs the whole recomputation (the work implies more
FLOP/s than the declared peak) runs in the verification task: the submission ends `rejected` with
its reasons, and no result, series, trial or system row, and no bundle file, remain.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from aiperf_runner.spec import bundle, keys

from devdata.runfactory import rewrite_events
from leaderboard.models import Result, ResultSeries, SiteKey, Submission, System, Trial
from tests.service.conftest import nothing_left, tar_with, upload


def repack(run: Path, out: Path) -> Path:
    """Tar a (signed) run directory as it is, without signing it again."""
    with tarfile.open(out, "w:gz") as tar:
        for path in sorted(run.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=path.relative_to(run).as_posix())
    return out


def assert_nothing_left(media_root: Path, submissions: int = 0) -> None:
    assert Submission.objects.count() == submissions
    assert Result.objects.count() == Trial.objects.count() == ResultSeries.objects.count() == 0
    assert System.objects.filter(registered=False).count() == 0  # the site's own registrations stay
    assert nothing_left(media_root) == []


def refused(resp, status: int, check: str, words: str) -> None:
    assert resp.status_code == status, resp.content
    body = resp.json()
    assert body["check"] == check, body
    assert words in body["detail"], body


def test_unknown_key(site_a, make_bundle, media_root):
    stranger = keys.generate_key()
    resp = upload(site_a.client, make_bundle(stranger))
    refused(resp, 403, "unknown_key", keys.fingerprint(stranger))
    assert_nothing_left(media_root)


def test_key_of_another_site_is_unknown_here(site_a, site_b, make_bundle, media_root):
    resp = upload(site_b.client, make_bundle(site_a.key))
    refused(resp, 403, "unknown_key", "not registered to site 'Site B'")
    assert_nothing_left(media_root)


def test_revoked_key(site_a, make_bundle, media_root):
    from django.core.management import call_command

    call_command("aiperf_site", "revoke-key", site_a.fingerprint)
    resp = upload(site_a.client, make_bundle(site_a.key))
    refused(resp, 403, "revoked_key", "revoked")
    assert_nothing_left(media_root)
    assert SiteKey.objects.get(fingerprint=site_a.fingerprint).revoked


def test_bad_signature(site_a, run_dir, tmp_path, media_root):
    run = run_dir()
    bundle.write_manifest(run, site_a.key)
    body = (run / bundle.MANIFEST_NAME).read_bytes()
    forged = keys.sign(keys.generate_key(), body)  # the manifest names site A's key; another key signed it
    (run / bundle.SIGNATURE_NAME).write_bytes(base64.b64encode(forged) + b"\n")
    resp = upload(site_a.client, repack(run, tmp_path / "forged.tar.gz"))
    refused(resp, 400, "signature", "bad signature")
    assert_nothing_left(media_root)


def test_tampered_event_line(site_a, run_dir, tmp_path, media_root):
    run = run_dir()
    bundle.write_manifest(run, site_a.key)
    events = run / "events.jsonl"
    data = events.read_bytes()
    events.write_bytes(data.replace(b'"val_accuracy":0.', b'"val_accuracy":0.9', 1))
    resp = upload(site_a.client, repack(run, tmp_path / "tampered.tar.gz"))
    refused(resp, 400, "manifest", "events.jsonl changed after signing")
    assert_nothing_left(media_root)


def test_tampered_event_line_signed_again(site_a, run_dir, make_bundle, media_root):
    """A site that edits a line and signs the result again still breaks the hash chain."""
    run = run_dir()
    events = run / "events.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    lines[5] = lines[5].replace(b'"images_trained":', b'"images_trained":9', 1)
    events.write_bytes(b"".join(lines))
    resp = upload(site_a.client, make_bundle(site_a.key, path=run))
    refused(resp, 400, "chain", "line 7: hash chain broken")
    assert_nothing_left(media_root)


def test_already_seen_run_id_in_a_new_bundle(site_a, run_dir, make_bundle, media_root):
    run = run_dir()
    first = upload(site_a.client, make_bundle(site_a.key, path=run))
    assert first.status_code == 201
    files = nothing_left(media_root)
    resp = upload(site_a.client, make_bundle(site_a.key, path=run))  # signed again: a different bundle
    refused(resp, 400, "run_id", "already submitted")
    assert Submission.objects.count() == 1 and Result.objects.count() == 1
    assert nothing_left(media_root) == files


def test_a_run_another_site_submitted_is_refused_without_naming_its_submission(site_a, site_b, run_dir,
                                                                             make_bundle, media_root):
    run = run_dir()
    assert upload(site_a.client, make_bundle(site_a.key, path=run)).status_code == 201
    files = nothing_left(media_root)
    resp = upload(site_b.client, make_bundle(site_b.key, path=run))  # a copy, signed with site B's key
    refused(resp, 400, "run_id", "already submitted")
    assert "submission" not in resp.json()["detail"].replace("already submitted", "")
    assert Submission.objects.count() == 1 and nothing_left(media_root) == files
    mine = upload(site_a.client, make_bundle(site_a.key, path=run))  # its own site is told which
    refused(mine, 400, "run_id", f"(submission {Submission.objects.get().pk})")


def test_oversize_upload(site_a, make_bundle, media_root, settings):
    settings.AIPERF_MAX_UPLOAD_BYTES = 2000
    path = make_bundle(site_a.key)
    assert path.stat().st_size > 2000
    resp = upload(site_a.client, path)
    refused(resp, 413, "size", "over this service's upload limit of 2000 bytes")
    assert_nothing_left(media_root)


def test_oversize_upload_refused_before_reading(site_a, media_root, settings):
    settings.AIPERF_MAX_UPLOAD_BYTES = 1000
    resp = upload(site_a.client, b"x" * 200_000)
    refused(resp, 413, "size", "upload limit")
    assert_nothing_left(media_root)


def test_not_a_tar(site_a, media_root):
    resp = upload(site_a.client, b"this is not a tar archive at all\n" * 10)
    refused(resp, 400, "bundle", "not a valid tar bundle")
    assert_nothing_left(media_root)


def test_tar_with_path_traversal(site_a, media_root):
    info = tarfile.TarInfo("../../etc/evil")
    info.size = 4
    resp = upload(site_a.client, tar_with([(info, b"evil")]))
    refused(resp, 400, "bundle", "'..'")
    assert_nothing_left(media_root)
    assert not (media_root.parent / "etc").exists()


def test_tar_with_symlink(site_a, media_root):
    info = tarfile.TarInfo("run.json")
    info.type = tarfile.SYMTYPE
    info.linkname = "/etc/passwd"
    resp = upload(site_a.client, tar_with([(info, None)]))
    refused(resp, 400, "bundle", "symlink")
    assert_nothing_left(media_root)


def test_unsigned_bundle(site_a, run_dir, tmp_path, media_root):
    resp = upload(site_a.client, repack(run_dir(), tmp_path / "unsigned.tar.gz"))
    refused(resp, 400, "manifest", "MANIFEST.json missing")
    assert_nothing_left(media_root)


def slow_system(site) -> int:
    """A registered system of one slow accelerator (a maintainer added its peak, 1 MFLOP/s): any of the
    factory's runs does more than its peak. (A CPU's clock is the rules', never its name's, from 3.1.)"""
    from leaderboard import systems
    from leaderboard.models import AcceleratorPeak

    AcceleratorPeak.objects.get_or_create(accelerator_model="Slow X1", defaults={
        "vendor": "Slow", "fp32": 1e6, "tf32": 1e6, "bf16": 1e6, "fp16": 1e6, "source": "a test's own"})
    return systems.register(site.site, {"name": "Slow box", "accelerator_model": "Slow X1",
                                        "accelerators_per_node": 1, "nodes": 1}).pk


def test_work_above_the_registered_peak(site_a, make_bundle, media_root):
    """More FLOP/s than the registered system's peak: found by the recomputation in the task; rejected."""
    resp = upload(site_a.client, make_bundle(site_a.key, system_id=slow_system(site_a), declared_peak=None))
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["status"] == "rejected"
    checks = {r["check"] for r in body["reasons"]}
    assert "plausibility.score_peak" in checks, body["reasons"]
    assert any("above the peak" in r["message"] for r in body["reasons"])
    assert body["result"] is None and body["score_ops"] is None
    # Only the rejection record remains: no result rows, no bundle file.
    assert_nothing_left(media_root, submissions=1)
    sub = Submission.objects.get()
    assert sub.status == "rejected" and not sub.bundle
    # Polling it says the same.
    again = site_a.client.get(f"/api/v1/submissions/{sub.pk}/").json()
    assert again["status"] == "rejected" and again["reasons"] == body["reasons"]


def test_log_claiming_impossible_epochs_is_rejected(site_a, run_dir, make_bundle, media_root):
    """A validly chained and signed log whose epochs are faster than the slot's peak allows."""
    run = run_dir()

    def fast(events):
        for ev in events:
            if ev["type"] == "epoch_end":
                ev["images_trained"] *= 10_000_000
        return events

    rewrite_events(run, fast)
    shutil.rmtree(run / "trials" / "t0000" / "events.jsonl", ignore_errors=True)
    resp = upload(site_a.client, make_bundle(site_a.key, path=run))
    assert resp.status_code == 201, resp.content
    assert resp.json()["status"] == "rejected"
    assert {r["check"].split(".")[0] for r in resp.json()["reasons"]} <= {"integrity", "plausibility"}
    assert_nothing_left(media_root, submissions=1)


@pytest.mark.parametrize("header", ["Token", "Bearer"])
def test_header_keywords(site_a, make_bundle, header):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{header} {site_a.token}")
    assert upload(client, make_bundle(site_a.key)).status_code == 201


def test_bundle_read_as_stream(site_a, media_root):
    """A gzip stream cut short is a broken bundle, not a server error."""
    good = io.BytesIO()
    with tarfile.open(fileobj=good, mode="w:gz") as tar:
        info = tarfile.TarInfo("run.json")
        data = os.urandom(100_000)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    resp = upload(site_a.client, good.getvalue()[:5000])
    refused(resp, 400, "bundle", "not a valid tar bundle")
    assert_nothing_left(media_root)
