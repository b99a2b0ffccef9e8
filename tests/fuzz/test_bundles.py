"""Manifests, signatures and tar members: spec/bundle.py's readers and the upload's (leaderboard/bundles.py).

Only the documented answers: `check_manifest` a list of findings, `read_manifest`/`safe_extract` a
BundleError, the upload's checks a `Rejected`; a time bound per input; `safe_extract` writes nothing
outside its extraction folder and leaves nothing there when it refuses.
"""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

import pytest
from aiperf_runner.spec import bundle, keys
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import rundir
from tests.fuzz.conftest import bounded, count, fuzz
from tests.fuzz.strategies import RAW, dumps, mutated

KEY = keys.generate_key()


def signed_copy():
    ctx = rundir.copy()
    run = ctx.__enter__()
    bundle.write_manifest(run, KEY)
    return ctx, run


@fuzz(120)
@given(st.sampled_from(["manifest", "signature"]), st.data())
def test_manifest_and_signature(which, data):
    count("manifest and signature")
    ctx, run = signed_copy()
    try:
        signed = (run / bundle.MANIFEST_NAME).read_bytes(), (run / bundle.SIGNATURE_NAME).read_bytes()
        manifest = json.loads(signed[0])
        if which == "manifest":
            new = data.draw(st.one_of(RAW, mutated(manifest).map(dumps)))
            (run / bundle.MANIFEST_NAME).write_bytes(new)
        else:
            new = data.draw(st.one_of(RAW, st.binary(min_size=64, max_size=64).map(base64.b64encode)))
            (run / bundle.SIGNATURE_NAME).write_bytes(new)
        with bounded("check_manifest"):
            findings = bundle.check_manifest(run, pubkey=keys.public_bytes(KEY.public_key()))
            try:
                assert isinstance(bundle.read_manifest(run), dict)
            except bundle.BundleError:
                pass
        assert isinstance(findings, list) and all(isinstance(f, str) for f in findings)
        now = (run / bundle.MANIFEST_NAME).read_bytes(), (run / bundle.SIGNATURE_NAME).read_bytes()
        if now[0] != signed[0] or now[1].strip() != signed[1].strip():
            assert findings, "a changed manifest or signature passed"
    finally:
        ctx.__exit__(None, None, None)


# ---- tar members ---------------------------------------------------------------------------------
NAMES = st.one_of(
    st.sampled_from(["run.json", "events.jsonl", "trials/t0000/graph.json", "../escape", "/etc/passwd", "a/../../b",
                     "./run.json", "a//b", "a/./b", "C:/x", "\\\\host\\x", "", ".", "..", "trials/../../x",
                     "x/" * 40 + "deep", "\x00nul", "a" * 300]),
    st.text(alphabet=st.sampled_from("ab./\\:\x00é"), max_size=12))
TYPES = st.sampled_from([tarfile.REGTYPE, tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE,
                         tarfile.CHRTYPE, tarfile.FIFOTYPE, tarfile.CONTTYPE, b"Z"])


@st.composite
def archives(draw) -> bytes:
    buf = io.BytesIO()
    mode = draw(st.sampled_from(["w", "w:gz", "w:bz2", "w:xz"]))
    with tarfile.open(fileobj=buf, mode=mode, format=draw(st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]))) as tar:
        for _ in range(draw(st.integers(min_value=0, max_value=5))):
            info = tarfile.TarInfo(draw(NAMES))
            info.type = draw(TYPES)
            info.linkname = draw(NAMES)
            payload = draw(st.binary(max_size=64)) if info.type in (tarfile.REGTYPE, tarfile.CONTTYPE) else b""
            info.size = len(payload)
            info.mode = draw(st.sampled_from([0o644, 0o777, 0o4755, 0]))
            try:
                tar.addfile(info, io.BytesIO(payload) if payload else None)
            except (ValueError, tarfile.TarError):
                pass  # a name the writer itself cannot store
    raw = buf.getvalue()
    if draw(st.booleans()):
        cut = draw(st.integers(min_value=0, max_value=len(raw)))
        raw = raw[:cut] + draw(st.binary(max_size=16))  # truncated or with junk at the end
    return raw


def _signed_files() -> dict[str, bytes]:
    ctx, run = signed_copy()
    try:
        return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    finally:
        ctx.__exit__(None, None, None)


SIGNED = _signed_files()


def resigned(files: dict[str, bytes]) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, payload in files.items():
            rel = bundle._safe_relpath(name)
            if rel is None or name in bundle.MANIFEST_FILES:
                continue
            try:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(payload)
            except OSError:
                continue
        try:
            bundle.write_manifest(root, KEY)
        except bundle.BundleError:
            return files  # run.json without a run id: cannot be signed
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@st.composite
def signed_archives(draw) -> bytes:
    """A signed run's bundle with one member's content replaced (JSON members: mutated) or one member added."""
    files = dict(SIGNED)
    name = draw(st.sampled_from(sorted(files)))
    if name.endswith((".json", ".jsonl")) and draw(st.booleans()):
        try:
            files[name] = dumps(draw(mutated(json.loads(files[name].splitlines()[0]))))
        except ValueError:
            files[name] = draw(RAW)
    else:
        files[name] = draw(RAW)
    if draw(st.booleans()):
        files[draw(NAMES) or "x"] = draw(st.binary(max_size=32))
    if draw(st.booleans()):
        files = resigned(files)  # as the site itself would: the signature holds, the content is forged
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for member, payload in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(payload)
            try:
                tar.addfile(info, io.BytesIO(payload))
            except (ValueError, tarfile.TarError):
                pass
    return buf.getvalue()


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@fuzz(300)
@given(st.one_of(archives(), st.binary(max_size=300)))
def test_tar_members(raw):
    count("tar members")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "bundle.tar").write_bytes(raw)
        (base / "out").mkdir()
        dest = base / "out" / "run"
        before = tree(base)
        try:
            with bounded("safe_extract"):
                files = bundle.safe_extract(base / "bundle.tar", dest, max_total_bytes=4096, max_members=8)
        except bundle.BundleError as exc:
            assert str(exc)
            assert not dest.exists()  # refused: nothing left
            assert tree(base) == before
            return
        # Everything written is inside dest, regular files and directories only.
        outside = {p for p in tree(base) - before if not p.startswith(os.path.join("out", "run"))}
        assert not outside, outside
        for path in dest.rglob("*"):
            assert not path.is_symlink() and (path.is_file() or path.is_dir())
            assert path.resolve().is_relative_to(dest.resolve())
        assert sorted(files) == sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())


@pytest.mark.django_db
@fuzz(150)
@given(st.one_of(archives(), st.binary(max_size=300), signed_archives()))
def test_the_uploads_checks(settings, tmp_path_factory, raw):
    """The synchronous checks of an upload (leaderboard/intake.py precheck): a Rejected, or a signed run."""
    from leaderboard import bundles
    from leaderboard.errors import Rejected

    count("upload checks")
    settings.MEDIA_ROOT = media = tmp_path_factory.mktemp("media")
    path = media / "upload.tar.gz"
    path.write_bytes(raw)
    with bounded("upload checks"):
        try:
            with bundles.extracted(path) as root:
                manifest, fingerprint = bundles.manifest_key(root)
                bundles.check_signed(root, manifest["public_key"])
                bundles.check_chain(root)
            count("upload checks: accepted", detail=True)
        except Rejected as exc:
            assert exc.check in ("bundle", "manifest", "signature", "chain") and exc.detail
            count(f"upload checks: refused by {exc.check}", detail=True)
    assert not any((media / "tmp").iterdir())  # the unpacked copy is gone
