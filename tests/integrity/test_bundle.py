"""Manifest, signature, packing and safe unpacking (docs/internals.md, "Bundle")."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from aiperf_runner import __version__
from aiperf_runner.spec import SPEC_VERSION, bundle, keys
from aiperf_runner.spec.bundle import BundleError
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.integrity.rundir import RUN_ID, member, tar_entries, write_tar

RUN_FILES = [
    "events.jsonl",
    "run.json",
    "trials/t0000/events.jsonl",
    "trials/t0000/graph.json",
    "trials/t0000/hparams.json",
    "trials/t0000/stderr.public.log",
    "trials/t0000/stdout.public.log",
]


# ---- manifest and signature --------------------------------------------------------------------
def test_manifest_lists_every_file_with_its_digest(run_dir: Path, site_key: Ed25519PrivateKey) -> None:
    body, signature = bundle.write_manifest(run_dir, site_key)
    assert (run_dir / "MANIFEST.json").read_bytes() == body
    manifest = json.loads(body)
    assert manifest["format"] == "aiperf-manifest/1"
    assert manifest["run_id"] == RUN_ID
    assert manifest["runner_version"] == __version__
    assert manifest["spec_version"] == SPEC_VERSION
    assert base64.b64decode(manifest["public_key"]) == keys.public_bytes(site_key)
    assert manifest["fingerprint"] == keys.fingerprint(site_key)
    assert isinstance(manifest["created_at"], float)
    assert list(manifest["files"]) == RUN_FILES  # POSIX relative paths, sorted, MANIFEST.* excluded
    for name, digest in manifest["files"].items():
        assert digest == hashlib.sha256((run_dir / name).read_bytes()).hexdigest()

    sig_text = (run_dir / "MANIFEST.sig").read_bytes()
    assert base64.b64decode(sig_text.strip()) == signature
    assert keys.verify_signature(site_key, body, signature)
    assert bundle.check_manifest(run_dir) == []
    assert bundle.check_manifest(run_dir, site_key.public_key()) == []
    assert bundle.check_manifest(run_dir, keys.public_line(site_key)) == []


def test_signing_again_replaces_the_manifest(run_dir: Path, site_key: Ed25519PrivateKey,
                                             other_key: Ed25519PrivateKey) -> None:
    bundle.write_manifest(run_dir, site_key)
    (run_dir / "trials" / "t0000" / "stdout.public.log").write_text("more output\n")
    bundle.write_manifest(run_dir, other_key)
    assert bundle.read_manifest(run_dir)["fingerprint"] == keys.fingerprint(other_key)
    assert bundle.check_manifest(run_dir, other_key) == []
    assert sorted(p.name for p in run_dir.iterdir()) == ["MANIFEST.json", "MANIFEST.sig", "events.jsonl",
                                                         "run.json", "trials"]


def test_unsigned_directory_is_one_finding(run_dir: Path) -> None:
    assert bundle.check_manifest(run_dir) == ["MANIFEST.json missing: the run directory is not signed "
                                              "(`aiperf-runner pack` signs it)"]


def test_not_a_run_directory(tmp_path: Path, site_key: Ed25519PrivateKey) -> None:
    with pytest.raises(BundleError, match="no run.json"):
        bundle.write_manifest(tmp_path, site_key)
    (tmp_path / "run.json").write_text("{")
    with pytest.raises(BundleError, match="run.json is not valid JSON"):
        bundle.write_manifest(tmp_path, site_key)


def test_symlink_in_run_directory_is_refused(run_dir: Path, site_key: Ed25519PrivateKey) -> None:
    (run_dir / "trials" / "link").symlink_to("/etc/hostname")
    with pytest.raises(BundleError, match="trials/link is a symlink"):
        bundle.write_manifest(run_dir, site_key)


def test_manifest_paths_are_not_trusted(signed_run: Path, site_key: Ed25519PrivateKey) -> None:
    manifest = bundle.read_manifest(signed_run)
    manifest["files"]["../outside"] = "0" * 64
    body = json.dumps(manifest).encode()
    (signed_run / "MANIFEST.json").write_bytes(body)
    (signed_run / "MANIFEST.sig").write_bytes(base64.b64encode(keys.sign(site_key, body)))
    assert bundle.check_manifest(signed_run, site_key) == ["MANIFEST.json lists an invalid path '../outside'"]


# ---- packing -------------------------------------------------------------------------------------
def test_pack_writes_a_tar_gz_with_files_at_top_level(run_dir: Path, site_key: Ed25519PrivateKey) -> None:
    out = bundle.pack(run_dir, None, site_key)
    assert out == run_dir.parent / "run.tar.gz"
    with tarfile.open(out, "r:gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == ["MANIFEST.json", "MANIFEST.sig", *RUN_FILES]
    assert all(m.isreg() and m.uname == "" and m.gname == "" and m.uid == 0 for m in members)
    assert (run_dir / "MANIFEST.json").exists()  # the run directory is signed too
    assert bundle.check_manifest(run_dir, site_key) == []


def test_pack_refuses_a_bundle_inside_the_run_directory(run_dir: Path, site_key: Ed25519PrivateKey) -> None:
    with pytest.raises(BundleError, match="must not be inside the run directory"):
        bundle.pack(run_dir, run_dir / "trials" / "x.tar.gz", site_key)


def test_extract_roundtrip(signed_bundle: Path, tmp_path: Path, site_key: Ed25519PrivateKey) -> None:
    dest = tmp_path / "out"
    files = bundle.safe_extract(signed_bundle, dest)
    assert sorted(files) == sorted(["MANIFEST.json", "MANIFEST.sig", *RUN_FILES])
    assert bundle.check_manifest(dest, site_key) == []


def test_extract_accepts_a_tar_made_by_hand(signed_run: Path, tmp_path: Path, site_key: Ed25519PrivateKey) -> None:
    """`tar czf run.tar.gz -C RUN_DIR .` gives `./`-prefixed names and directory members."""
    out = tmp_path / "by-hand.tar.gz"
    subprocess.run(["tar", "czf", str(out), "-C", str(signed_run), "."], check=True)
    dest = tmp_path / "out"
    bundle.safe_extract(out, dest)
    assert bundle.check_manifest(dest, site_key) == []


# ---- unsafe or broken bundles ----------------------------------------------------------------------
def _refused(bundle_path: Path, dest: Path, message: str, **limits: int) -> None:
    with pytest.raises(BundleError, match=message):
        bundle.safe_extract(bundle_path, dest, **limits)
    assert not dest.exists()  # nothing is left behind


@pytest.mark.parametrize("entry, message", [
    (member("trials/t0000/hard", tarfile.LNKTYPE, "run.json"), r"member 'trials/t0000/hard' is a hard link"),
    (member("dev", tarfile.CHRTYPE), r"member 'dev' is a device file"),
    (member("disk", tarfile.BLKTYPE), r"member 'disk' is a device file"),
    (member("pipe", tarfile.FIFOTYPE), r"member 'pipe' is a FIFO"),
    (member("sub/../../x"), r"member 'sub/../../x' has a path outside the bundle"),
    (member("C:/windows"), r"member 'C:/windows' has an absolute path"),
])
def test_unsafe_members_are_refused(signed_bundle: Path, tmp_path: Path, entry: tarfile.TarInfo,
                                    message: str) -> None:
    bad = write_tar(tmp_path / "bad.tar.gz", [*tar_entries(signed_bundle), (entry, b"x" if entry.isreg() else None)])
    _refused(bad, tmp_path / "out", message)


def test_duplicate_names_are_refused(signed_bundle: Path, tmp_path: Path) -> None:
    bad = write_tar(tmp_path / "bad.tar.gz", [*tar_entries(signed_bundle), (member("./run.json"), b"{}")])
    _refused(bad, tmp_path / "out", r"member './run.json' appears twice")


def test_file_under_a_file_is_refused(tmp_path: Path) -> None:
    bad = write_tar(tmp_path / "bad.tar.gz", [(member("a"), b"1"), (member("a/b"), b"2")])
    _refused(bad, tmp_path / "out", r"member 'a/b' clashes")


def test_size_and_count_limits(signed_bundle: Path, tmp_path: Path) -> None:
    _refused(signed_bundle, tmp_path / "out", r"member '.*' is \d+ bytes, over the 100-byte limit per file",
             max_file_bytes=100)
    _refused(signed_bundle, tmp_path / "out", r"bundle holds more than 1000 bytes \(at member '.*'\)",
             max_total_bytes=1000)
    _refused(signed_bundle, tmp_path / "out", r"bundle has more than 3 members \(at '.*'\)", max_members=3)


def test_declared_size_counts_before_reading(tmp_path: Path) -> None:
    """A member declaring 1 TiB is refused from its header, before anything is written."""
    info = member("big")
    info.size = 1 << 40
    raw = info.tobuf(tarfile.PAX_FORMAT)  # a header alone, no data: the limit must trip first
    (tmp_path / "big.tar").write_bytes(raw)
    _refused(tmp_path / "big.tar", tmp_path / "out", r"member 'big' is 1099511627776 bytes")


@pytest.mark.parametrize("content, message", [
    (b"", "not a valid tar bundle or is corrupt"),
    (b"this is not a tar archive\n" * 40, "not a valid tar bundle or is corrupt"),
    (b"\x1f\x8b\x08\x00" + b"\x00" * 40, "not a valid tar bundle or is corrupt"),
])
def test_not_a_tar(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "b").write_bytes(content)
    _refused(tmp_path / "b", tmp_path / "out", message)


def test_truncated_bundle(signed_bundle: Path, tmp_path: Path) -> None:
    data = signed_bundle.read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(data[: len(data) // 2])
    _refused(tmp_path / "cut.tar.gz", tmp_path / "out", "not a valid tar bundle or is corrupt")


def test_missing_bundle_and_busy_target(signed_bundle: Path, tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="cannot read bundle"):
        bundle.safe_extract(tmp_path / "nope.tar.gz", tmp_path / "out")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep").write_text("mine")
    with pytest.raises(BundleError, match="exists and is not an empty directory"):
        bundle.safe_extract(signed_bundle, busy)
    assert (busy / "keep").read_text() == "mine"


def test_failed_extract_into_existing_empty_dir_leaves_it_empty(signed_bundle: Path, tmp_path: Path) -> None:
    dest = tmp_path / "empty"
    dest.mkdir()
    bad = write_tar(tmp_path / "bad.tar.gz", [*tar_entries(signed_bundle), (member("/etc/x"), b"x")])
    with pytest.raises(BundleError, match="absolute path"):
        bundle.safe_extract(bad, dest)
    assert dest.is_dir() and os.listdir(dest) == []


def test_pack_default_output_for_dot(run_dir: Path, site_key: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(run_dir)
    out = bundle.pack(Path("."), None, site_key)
    assert out == run_dir.parent / "run.tar.gz"
    assert out.is_file()
