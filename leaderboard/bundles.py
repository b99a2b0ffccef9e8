"""Reading an uploaded bundle: unpacking it safely, its manifest and signer, its signature and hash chain.

Shared by the upload (leaderboard/intake.py) and the verification task (leaderboard/pipeline.py);
every failure is a `Rejected` named after the upload check of docs/service.md (`bundle`,
`manifest`, `signature`, `chain`). The reading itself is `aiperf_runner.spec`'s.
"""

from __future__ import annotations

import base64
import binascii
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiperf_runner.spec import bundle as spec_bundle
from aiperf_runner.spec import eventlog as spec_eventlog
from aiperf_runner.spec import keys as spec_keys
from aiperf_runner.spec import logchunks as spec_logchunks
from django.conf import settings

from leaderboard.errors import Rejected

# The words by which spec/verify.py tells check_manifest's findings about the signature from those
# about the files; the upload sorts them the same way into its `signature` and `manifest` checks.
SIGNATURE_WORDS = ("signature", "signed", "public_key", "fingerprint", spec_bundle.SIGNATURE_NAME)


def tmp_dir() -> Path:
    """Scratch space for uploads and unpacked bundles, on the same filesystem as the stored bundles."""
    path = Path(settings.MEDIA_ROOT) / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sweep_tmp(max_age_s: float) -> list[str]:
    """Remove what MEDIA_ROOT/tmp holds untouched for `max_age_s` seconds: the leftovers of a process killed
    mid-way (a worker's unpacked bundle, a spooled upload), which nobody else would ever remove. The names
    removed. Nothing alive is that old: a task never outlives its hard time limit (AIPERF_TMP_MAX_AGE_S)."""
    root = Path(settings.MEDIA_ROOT) / "tmp"
    if not root.is_dir():
        return []
    cutoff = time.time() - max_age_s
    removed = []
    for entry in sorted(root.iterdir()):
        try:
            if entry.lstat().st_mtime >= cutoff:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except FileNotFoundError:  # its owner removed it meanwhile
            continue
        removed.append(entry.name)
    return removed


def bundle_path(digest: str) -> str:
    """The storage name of a bundle, relative to MEDIA_ROOT."""
    return f"bundles/{digest[:2]}/{digest}.tar.gz"


@contextmanager
def extracted(path: str | Path) -> Iterator[Path]:
    """A bundle safely unpacked into a temporary directory (`spec.bundle.safe_extract`), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="extract-", dir=tmp_dir()) as tmp:
        root = Path(tmp) / "run"
        try:
            spec_bundle.safe_extract(path, root)
        except spec_bundle.BundleError as exc:
            raise Rejected("bundle", f"not an acceptable bundle: {exc}") from None
        yield root


def manifest_key(root: Path) -> tuple[dict[str, Any], str]:
    """The manifest and the fingerprint of the public key it names (computed, not copied)."""
    try:
        manifest = spec_bundle.read_manifest(root)
    except spec_bundle.BundleError as exc:
        raise Rejected("manifest", str(exc)) from None
    try:
        raw = base64.b64decode(str(manifest.get("public_key")), validate=True)
        fingerprint = spec_keys.fingerprint(raw)
    except (binascii.Error, ValueError):
        raise Rejected("manifest", f"{spec_bundle.MANIFEST_NAME} has no valid 'public_key'") from None
    if not isinstance(manifest.get("run_id"), str) or not manifest["run_id"]:
        raise Rejected("manifest", f"{spec_bundle.MANIFEST_NAME} has no 'run_id'")
    return manifest, fingerprint


def check_signed(root: Path, public_key: str) -> None:
    """The manifest signed by `public_key` (base64) and every file as signed: `spec.bundle.check_manifest`, once."""
    findings = spec_bundle.check_manifest(root, pubkey=base64.b64decode(public_key))
    about_signature = [f for f in findings if any(word in f for word in SIGNATURE_WORDS)]
    if about_signature:
        raise Rejected("signature", "; ".join(about_signature))
    if findings:
        raise Rejected("manifest", "; ".join(findings))


def check_chain(root: Path) -> None:
    """The main log's hash chain (a line edited, dropped or moved), read as a stream (a large log in
    parallel chunks: spec/logchunks.py)."""
    try:
        spec_logchunks.check_log(root / "events.jsonl")
    except FileNotFoundError:
        raise Rejected("chain", "events.jsonl missing: not a run directory") from None
    except spec_eventlog.LogError as exc:
        raise Rejected("chain", f"events.jsonl {exc}") from None
