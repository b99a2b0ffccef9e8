"""The tamper matrix: a signed run is accepted; every kind of change is rejected by name.

Changes to an event log are caught twice: by the manifest digest of the signed run, and, on a copy
re-signed after the change (a forger holding the site key, or a change made before signing), by
the log's own hash chain.
"""

from __future__ import annotations

import base64
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from aiperf_runner.spec import bundle, keys
from aiperf_runner.spec.bundle import BundleError
from aiperf_runner.spec.eventlog import LogError, iter_events
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.integrity.rundir import member, tar_entries, write_tar

# Each log and the 0-based index of an epoch_end line that is not the last line.
LOGS = {"events.jsonl": 3, "trials/t0000/events.jsonl": 1}


def _rewrite(path: Path, edit: Callable[[list[bytes]], None]) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    edit(lines)
    path.write_bytes(b"".join(lines))


def change_one_byte(path: Path, i: int) -> None:
    def edit(lines: list[bytes]) -> None:
        assert b'"images_trained":4000' in lines[i]
        lines[i] = lines[i].replace(b'"images_trained":4000', b'"images_trained":9000', 1)
    _rewrite(path, edit)


def remove_a_line(path: Path, i: int) -> None:
    _rewrite(path, lambda lines: lines.pop(i))


def swap_two_lines(path: Path, i: int) -> None:
    def edit(lines: list[bytes]) -> None:
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    _rewrite(path, edit)


# tamper(path, i) and what the chain then reports: (line number from i, reason)
LOG_TAMPERS = [
    pytest.param(change_one_byte, lambda i: (i + 2, "hash chain broken"), id="byte-changed"),
    pytest.param(remove_a_line, lambda i: (i + 1, f"sequence number {i + 1}, expected {i}"), id="line-removed"),
    pytest.param(swap_two_lines, lambda i: (i + 1, f"sequence number {i + 1}, expected {i}"), id="lines-swapped"),
]


def assert_intact(root: Path, key: Ed25519PrivateKey) -> None:
    assert bundle.check_manifest(root, key.public_key()) == []
    for log in LOGS:
        assert len(list(iter_events(root / log))) > 2


# ---- the untouched run ------------------------------------------------------------------------------
def test_signed_run_is_accepted(signed_run: Path, signed_bundle: Path, tmp_path: Path,
                                site_key: Ed25519PrivateKey) -> None:
    assert_intact(signed_run, site_key)
    dest = tmp_path / "unpacked"
    bundle.safe_extract(signed_bundle, dest)
    assert_intact(dest, site_key)


# ---- event lines: the manifest digest, then the chain of a re-signed copy ---------------------------
@pytest.mark.parametrize("log", LOGS)
@pytest.mark.parametrize("tamper, expected", LOG_TAMPERS)
def test_event_log_tampering(signed_run: Path, tmp_path: Path, site_key: Ed25519PrivateKey, log: str,
                             tamper: Callable[[Path, int], None], expected: Callable[[int], tuple[int, str]]) -> None:
    tamper(signed_run / log, LOGS[log])
    assert bundle.check_manifest(signed_run, site_key) == [
        f"file {log} changed after signing (SHA-256 differs from MANIFEST.json)"]

    resigned = Path(shutil.copytree(signed_run, tmp_path / "resigned"))
    bundle.write_manifest(resigned, site_key)
    assert bundle.check_manifest(resigned, site_key) == []  # the manifest no longer sees it ...
    with pytest.raises(LogError) as err:  # ... the chain does
        list(iter_events(resigned / log))
    line, reason = expected(LOGS[log])
    assert err.value.line == line
    assert reason in err.value.reason


def test_tampered_bundle_member(signed_bundle: Path, tmp_path: Path, site_key: Ed25519PrivateKey) -> None:
    """The same change made inside the tar: unpacking works, the manifest check names the file."""
    entries = [(info, data.replace(b'"slots":1', b'"slots":9', 1) if info.name == "events.jsonl" else data)
               for info, data in tar_entries(signed_bundle)]
    bad = write_tar(tmp_path / "bad.tar.gz", entries)
    dest = tmp_path / "out"
    bundle.safe_extract(bad, dest)
    assert bundle.check_manifest(dest, site_key) == [
        "file events.jsonl changed after signing (SHA-256 differs from MANIFEST.json)"]


# ---- files added or removed ---------------------------------------------------------------------
def test_file_added_after_signing(signed_run: Path, site_key: Ed25519PrivateKey) -> None:
    (signed_run / "trials" / "t0001").mkdir()
    (signed_run / "trials" / "t0001" / "graph.json").write_text("{}")
    assert bundle.check_manifest(signed_run, site_key) == [
        "file trials/t0001/graph.json added after signing (not in MANIFEST.json)"]


def test_file_removed_after_signing(signed_run: Path, site_key: Ed25519PrivateKey) -> None:
    (signed_run / "trials" / "t0000" / "graph.json").unlink()
    assert bundle.check_manifest(signed_run, site_key) == [
        "file trials/t0000/graph.json missing (listed in MANIFEST.json)"]


def test_symlink_added_after_signing(signed_run: Path, site_key: Ed25519PrivateKey) -> None:
    (signed_run / "trials" / "t0000" / "graph.json").unlink()
    (signed_run / "trials" / "t0000" / "graph.json").symlink_to("../../run.json")
    assert bundle.check_manifest(signed_run, site_key) == ["file trials/t0000/graph.json is not a regular file"]


# ---- signatures -------------------------------------------------------------------------------------
def test_resigned_by_another_key(signed_run: Path, site_key: Ed25519PrivateKey,
                                 other_key: Ed25519PrivateKey) -> None:
    """A forger re-signs with their own key: self-consistent, but not the site's key."""
    bundle.write_manifest(signed_run, other_key)
    assert bundle.check_manifest(signed_run) == []  # only the expected key binds a run to a site
    assert bundle.check_manifest(signed_run, site_key.public_key()) == [
        f"signed by another key: the manifest's key is {keys.fingerprint(other_key)}, "
        f"expected {keys.fingerprint(site_key)}"]


def test_signature_file_from_another_key(signed_run: Path, site_key: Ed25519PrivateKey,
                                         other_key: Ed25519PrivateKey) -> None:
    body = (signed_run / "MANIFEST.json").read_bytes()
    (signed_run / "MANIFEST.sig").write_bytes(base64.b64encode(keys.sign(other_key, body)) + b"\n")
    [finding] = bundle.check_manifest(signed_run, site_key)
    assert finding.startswith(f"bad signature: MANIFEST.sig is not {keys.fingerprint(site_key)}'s signature")


def test_manifest_edited_to_match_a_changed_file(signed_run: Path, site_key: Ed25519PrivateKey) -> None:
    """Changing a file and its digest in the manifest, without the key, breaks the signature."""
    change_one_byte(signed_run / "events.jsonl", LOGS["events.jsonl"])
    manifest = (signed_run / "MANIFEST.json").read_text()
    old = bundle.read_manifest(signed_run)["files"]["events.jsonl"]
    (signed_run / "MANIFEST.json").write_text(manifest.replace(old, bundle.sha256_file(signed_run / "events.jsonl")))
    [finding] = bundle.check_manifest(signed_run, site_key)
    assert finding.startswith("bad signature")


def test_signature_missing_or_garbled(signed_run: Path, site_key: Ed25519PrivateKey) -> None:
    (signed_run / "MANIFEST.sig").write_text("not base64!\n")
    assert bundle.check_manifest(signed_run, site_key) == ["MANIFEST.sig is not valid base64"]
    (signed_run / "MANIFEST.sig").unlink()
    assert bundle.check_manifest(signed_run, site_key) == ["MANIFEST.sig missing: the manifest is not signed"]


# ---- hostile tar entries ------------------------------------------------------------------------------
@pytest.mark.parametrize("entry, message", [
    pytest.param(member("../escaped.txt"), r"member '\.\./escaped\.txt' has a path outside the bundle \('\.\.'\)",
                 id="dotdot"),
    pytest.param(member("trials/link", tarfile.SYMTYPE, "/etc/passwd"),
                 r"member 'trials/link' is a symlink \(to '/etc/passwd'\)", id="symlink"),
    pytest.param(member("/tmp/aiperf-absolute.txt"), r"member '/tmp/aiperf-absolute\.txt' has an absolute path",
                 id="absolute"),
])
def test_hostile_tar_entries(signed_bundle: Path, tmp_path: Path, entry: tarfile.TarInfo, message: str) -> None:
    data = b"owned\n" if entry.isreg() else None
    bad = write_tar(tmp_path / "bad.tar.gz", [*tar_entries(signed_bundle), (entry, data)])
    dest = tmp_path / "a" / "out"
    with pytest.raises(BundleError, match=message):
        bundle.safe_extract(bad, dest)
    assert not dest.exists()
    assert not (tmp_path / "a" / "escaped.txt").exists()
    assert not Path("/tmp/aiperf-absolute.txt").exists()
