"""Manifest, signature, tar packing and safe unpacking of a run directory.

- A bundle holds only the files the runner writes for it (`BUNDLED`, an allow-list): anything else
  in the run directory (a note, a job script's output) is left out, as are the runner's own files
  that are never published (`NOT_BUNDLED`, `local/`).
- `MANIFEST.json` lists the SHA-256 of every file the bundle holds (except the two manifest
  files), with the run id, versions and the signer's public key; `MANIFEST.sig` is the base64
  Ed25519 signature of the exact bytes of `MANIFEST.json`.
- A bundle is a tar.gz of those files at top level, `MANIFEST.json` first.
- `safe_extract` unpacks an untrusted bundle; `check_manifest` says what, if anything, differs
  from what was signed. Files are hashed in chunks: nothing here holds a whole file in memory.
"""

from __future__ import annotations

import base64
import binascii
import errno
import fnmatch
import hashlib
import json
import lzma
import os
import shutil
import tarfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from aiperf_runner.spec import SPEC_VERSION, keys
from aiperf_runner.spec.errors import AiperfError

MANIFEST_FORMAT = "aiperf-manifest/1"
MANIFEST_NAME = "MANIFEST.json"
SIGNATURE_NAME = "MANIFEST.sig"
MANIFEST_FILES = (MANIFEST_NAME, SIGNATURE_NAME)
LOCAL_DIR = "local"
"""The run directory's site-private folder (raw host names, data root, accounts): never bundled."""
NOT_BUNDLED = (
    ("weights.safetensors", "a trial's kept weights: uploaded only when the service's audit asks for them "
                            "(their digest is in the signed log)"),
    ("*.safetensors", "weights: never bundled"),
    ("checkpoint.pt", "a trial's resume checkpoint: local only"),
    ("*.pt", "a checkpoint or weights: never bundled"),
    ("*.pth", "a checkpoint or weights: never bundled"),
    ("*.ckpt", "a checkpoint: never bundled"),
    ("*.tmp", "a file being written"),
    ("stdout.log", "raw output (may name hosts and paths): the bundle holds its masked copy"),
    ("stderr.log", "raw output (may name hosts and paths): the bundle holds its masked copy"),
    ("slurm-*", "SLURM job files (job ids, node names, account): the controller's bookkeeping"),
    ("controller.lock", "the running controller's lock"),
    ("pid", "a running trial's process record (the local backend's bookkeeping)"),
)
"""Files a run directory keeps but a bundle never holds, by name pattern (fnmatch), with the reason;
and everything under `local/`. The verifier skips them too, wherever they are."""

PUBLIC_LOG_BYTES = 16 << 10
"""How much of each raw trial log a bundle holds, as its masked copy (`*.public.log`, made by
`rundir/publish.py`): keeps a 12-hour 512-slot bundle under the upload limit (log-format.md)."""
_PUBLIC_LOG = (f"the last {PUBLIC_LOG_BYTES >> 10} KiB of the trial's output, hosts and paths masked "
               "(for reading failures; not used by verify)")
BUNDLED = (
    (MANIFEST_NAME, "the SHA-256 of every other file listed here (written by pack)"),
    (SIGNATURE_NAME, f"the site key's signature of {MANIFEST_NAME} (written by pack)"),
    ("run.json", "what was run, on what, with which settings (verify reads it)"),
    ("events.jsonl", "the signed, hash-chained event log: the score is recomputed from it"),
    ("trials/*/events.jsonl", "the trial's own hash-chained log (its epochs and result)"),
    ("trials/*/graph.json", "the trial's architecture: FLOPs per image are computed from it"),
    ("trials/*/hparams.json", "the trial's hyper-parameters (checked against the log; the audit re-evaluates)"),
    ("trials/*/trial.json", "the trial's settings (the audit re-evaluates the trial with them)"),
    ("trials/*/stdout.public.log", _PUBLIC_LOG),
    ("trials/*/stderr.public.log", _PUBLIC_LOG),
)
"""The allow-list: every file the runner writes into a run directory for its bundle, by path pattern
relative to the run directory (fnmatch per path component: `*` never crosses a `/`), with why the
bundle holds it. Packing leaves out every other file (`NOT_WRITTEN`): a new file the runner writes
for publication is added here, once; one it keeps to itself goes in `NOT_BUNDLED`."""
NOT_WRITTEN = "not written by the runner (a bundle holds only the runner's own files)"
LEFT_OUT_NAME = "left-out.json"
"""In `local/` (site-private: the names may name the site): the files signing left out as `NOT_WRITTEN`.
Checking the run directory against its manifest skips them as it skips `NOT_BUNDLED` ones: they were
there when it was signed and are no part of the signed run. A file added after signing is still reported.
Only the site's own run directory has the record: `safe_extract` refuses a bundle with a `local/` member."""

CHUNK = 1 << 20
MAX_TOTAL_BYTES = 8 << 30
MAX_FILE_BYTES = 4 << 30
MAX_MEMBERS = 200_000


class BundleError(AiperfError, ValueError):
    """A run directory or bundle that cannot be signed, packed or unpacked; the message says why."""


# ---- hashing and listing -----------------------------------------------------------------------
def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _walk(root: Path, rel: PurePosixPath = PurePosixPath()) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """(POSIX relative path, entry) of everything under `root`, without following symlinks."""
    with os.scandir(root / rel) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        path = rel / entry.name
        yield path.as_posix(), entry
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(root, path)


def not_bundled(rel: str) -> str | None:
    """Why the run directory's file `rel` (POSIX relative path) stays out of bundles, or None."""
    if rel == LOCAL_DIR or rel.startswith(LOCAL_DIR + "/"):
        return "site-private (raw host names, data root, accounts): never bundled"
    name = rel.rsplit("/", 1)[-1]
    for pattern, why in NOT_BUNDLED:
        if fnmatch.fnmatchcase(name, pattern):
            return why
    return None


def _path_matches(rel: str, pattern: str) -> bool:
    parts, wanted = rel.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted, strict=True))


def why_bundled(rel: str) -> str | None:
    """Why a bundle holds the run directory's file `rel` (its `BUNDLED` entry), or None: not the runner's."""
    for pattern, why in BUNDLED:
        if _path_matches(rel, pattern):
            return why
    return None


def left_out(rel: str) -> str | None:
    """Why packing leaves the run directory's file `rel` out of the bundle, or None when the bundle holds it:
    a runner file never bundled (`not_bundled`), else any file the allow-list does not name (`NOT_WRITTEN`)."""
    reason = not_bundled(rel)
    if reason is None and why_bundled(rel) is None:
        return NOT_WRITTEN
    return reason


def run_files(run_dir: str | Path) -> list[str]:
    """The sorted POSIX relative paths of the files a manifest covers: those the allow-list
    (`BUNDLED`) names, but MANIFEST.*.

    A symlink or special file in the run directory is an error: a bundle cannot carry it.
    """
    return _sorted_files(Path(run_dir))[0]


def _sorted_files(root: Path) -> tuple[list[str], list[str]]:
    """The files a manifest covers and those left out as `NOT_WRITTEN`, each sorted."""
    if not root.is_dir():
        raise BundleError(f"{root} is not a directory")
    files: list[str] = []
    foreign: list[str] = []
    for rel, entry in _walk(root):
        if entry.is_symlink():
            raise BundleError(f"{rel} is a symlink; a run directory holds regular files only")
        if entry.is_dir(follow_symlinks=False):
            continue
        if not entry.is_file(follow_symlinks=False):
            raise BundleError(f"{rel} is not a regular file")
        reason = left_out(rel)
        if reason is None and rel not in MANIFEST_FILES:
            files.append(rel)
        elif reason == NOT_WRITTEN:
            foreign.append(rel)
    return sorted(files), sorted(foreign)


def _record_left_out(root: Path, foreign: list[str]) -> None:
    """Write (or, with nothing left out, remove) `local/left-out.json`: see LEFT_OUT_NAME."""
    path = root / LOCAL_DIR / LEFT_OUT_NAME
    if not foreign:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(mode=0o700, exist_ok=True)
    _atomic_write(path, (json.dumps({"why": NOT_WRITTEN, "files": foreign}, indent=1) + "\n").encode())


def _left_out_when_signed(root: Path) -> set[str]:
    """The files `local/left-out.json` says the last signing left out; none when it is absent or unreadable."""
    try:
        files = json.loads((root / LOCAL_DIR / LEFT_OUT_NAME).read_bytes()).get("files")
    except (OSError, ValueError, AttributeError, RecursionError):
        return set()
    return {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()


# ---- manifest ----------------------------------------------------------------------------------
def _run_json(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise BundleError(f"{run_dir} has no run.json: not a run directory") from None
    except ValueError as exc:
        raise BundleError(f"run.json is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
        raise BundleError("run.json has no string 'run_id'")
    return data


def _manifest_bytes(run: dict[str, Any], digests: dict[str, str], public: keys.PublicKeyLike) -> bytes:
    manifest = {
        "format": MANIFEST_FORMAT,
        "run_id": run["run_id"],
        "runner_version": run.get("runner_version"),
        "spec_version": run.get("spec_version", SPEC_VERSION),
        "public_key": keys.public_b64(public),
        "fingerprint": keys.fingerprint(public),
        "created_at": time.time(),
        "files": dict(sorted(digests.items())),
    }
    return (json.dumps(manifest, sort_keys=True, indent=1) + "\n").encode()


def write_manifest(run_dir: str | Path, private_key: Ed25519PrivateKey) -> tuple[bytes, bytes]:
    """Hash the files of the run directory the bundle holds (`run_files`), write MANIFEST.json and
    MANIFEST.sig into it.

    Returns (the manifest bytes, the raw 64-byte signature); MANIFEST.sig holds its base64.
    Signing again replaces both files, and `local/left-out.json` (the files left out as not the runner's).
    """
    root = Path(run_dir)
    run = _run_json(root)
    files, foreign = _sorted_files(root)
    digests = {rel: sha256_file(root / rel) for rel in files}
    body = _manifest_bytes(run, digests, private_key)
    _record_left_out(root, foreign)
    signature = keys.sign(private_key, body)
    _atomic_write(root / MANIFEST_NAME, body)
    _atomic_write(root / SIGNATURE_NAME, base64.b64encode(signature) + b"\n")
    return body, signature


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The parsed MANIFEST.json of a directory (not checked: see `check_manifest`)."""
    path = Path(directory) / MANIFEST_NAME
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise BundleError(f"{MANIFEST_NAME} missing: the run directory is not signed "
                          "(`aiperf-runner pack` signs it)") from None
    except ValueError as exc:
        raise BundleError(f"{MANIFEST_NAME} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BundleError(f"{MANIFEST_NAME} is not a JSON object")
    if data.get("format") != MANIFEST_FORMAT:
        raise BundleError(f"{MANIFEST_NAME} has format {data.get('format')!r}, expected {MANIFEST_FORMAT!r}")
    if not isinstance(data.get("files"), dict):
        raise BundleError(f"{MANIFEST_NAME} has no 'files' object")
    return data


def _path_problem(name: str) -> str | None:
    """Why `name` is not a safe relative path inside a bundle, or None when it is."""
    if name.startswith(("/", "\\")) or name[1:2] == ":":
        return "an absolute path"
    if ".." in name.replace("\\", "/").split("/"):
        return "a path outside the bundle ('..')"
    if "\\" in name or "\0" in name or not _parts(name):
        return "an invalid path"
    return None


def _parts(name: str) -> list[str]:
    return [p for p in name.split("/") if p not in ("", ".")]


def _safe_relpath(name: str) -> PurePosixPath | None:
    """`name` as a clean relative POSIX path (`./` and doubled slashes dropped), or None if unsafe."""
    if _path_problem(name) is not None:
        return None
    return PurePosixPath(*_parts(name))


def check_manifest(directory: str | Path, pubkey: keys.PublicKeyLike | str | Path | None = None) -> list[str]:
    """What differs between a (signed) run directory and its manifest: [] means intact.

    Each finding is a sentence naming the problem: a missing, invalid or foreign-key signature,
    a listed file missing or changed, a file added after signing (not one that signing left out:
    `LEFT_OUT_NAME`). `pubkey`, when given, is the key the result must be signed with (anything
    `keys.load_public_key` accepts).
    A directory without a readable manifest gives a single finding.
    """
    root = Path(directory)
    try:
        manifest = read_manifest(root)
        body = (root / MANIFEST_NAME).read_bytes()
    except (BundleError, OSError) as exc:
        return [str(exc)]
    findings: list[str] = []

    # The signature, by the key the manifest names, and that key against the expected one.
    signer = None
    try:
        signer = keys.load_public_key(base64.b64decode(str(manifest.get("public_key")), validate=True))
    except (binascii.Error, ValueError):
        findings.append(f"{MANIFEST_NAME} has no valid 'public_key'")
    if signer is not None:
        if manifest.get("fingerprint") != keys.fingerprint(signer):
            findings.append(f"{MANIFEST_NAME} fingerprint {manifest.get('fingerprint')!r} does not match its "
                            f"public key ({keys.fingerprint(signer)})")
        if pubkey is not None:
            expected = keys.load_public_key(pubkey)
            if keys.public_bytes(expected) != keys.public_bytes(signer):
                findings.append(f"signed by another key: the manifest's key is {keys.fingerprint(signer)}, "
                                f"expected {keys.fingerprint(expected)}")
        try:
            signature = base64.b64decode((root / SIGNATURE_NAME).read_bytes().strip(), validate=True)
        except FileNotFoundError:
            findings.append(f"{SIGNATURE_NAME} missing: the manifest is not signed")
        except (binascii.Error, ValueError, OSError):
            findings.append(f"{SIGNATURE_NAME} is not valid base64")
        else:
            if not keys.verify_signature(signer, body, signature):
                findings.append(f"bad signature: {SIGNATURE_NAME} is not {keys.fingerprint(signer)}'s signature "
                                f"of {MANIFEST_NAME} (the manifest was changed or signed by another key)")

    # run.json's run id against the manifest's.
    try:
        run_id = _run_json(root)["run_id"]
    except BundleError:
        run_id = None  # run.json missing or broken: the file checks below report it
    if run_id is not None and run_id != manifest.get("run_id"):
        findings.append(f"run id {run_id!r} in run.json differs from {manifest.get('run_id')!r} in {MANIFEST_NAME}")

    # Listed files: present, regular, same digest.
    listed: set[str] = set()
    for name, expected_digest in sorted(manifest["files"].items()):
        rel = _safe_relpath(name)
        if rel is None or rel.as_posix() != name or name in MANIFEST_FILES:
            findings.append(f"{MANIFEST_NAME} lists an invalid path {name!r}")
            continue
        listed.add(name)
        path = root / rel
        if path.is_symlink() or (path.exists() and not path.is_file()):
            findings.append(f"file {name} is not a regular file")
        elif not path.exists():
            findings.append(f"file {name} missing (listed in {MANIFEST_NAME})")
        elif sha256_file(path) != expected_digest:
            findings.append(f"file {name} changed after signing (SHA-256 differs from {MANIFEST_NAME})")

    # Anything else in the directory.
    foreign = _left_out_when_signed(root)
    for rel_name, entry in _walk(root):
        if rel_name in MANIFEST_FILES or rel_name in listed:
            continue
        if not_bundled(rel_name) is not None and not entry.is_symlink():
            continue  # kept beside the signed run, never in it (weights: their digests are in the log)
        if rel_name in foreign and left_out(rel_name) == NOT_WRITTEN and entry.is_file(follow_symlinks=False):
            continue  # not the runner's: there when the run was signed, and left out of its bundle
        if entry.is_symlink():
            findings.append(f"{rel_name} is a symlink, not part of the signed run")
        elif entry.is_file(follow_symlinks=False):
            findings.append(f"file {rel_name} added after signing (not in {MANIFEST_NAME})")
        elif not entry.is_dir(follow_symlinks=False):
            findings.append(f"{rel_name} is not a regular file")
    return findings


# ---- packing -----------------------------------------------------------------------------------
class _HashingReader:
    """A file wrapper that hashes what tarfile reads through it."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._fh.read(size)
        self.hash.update(data)
        return data


def _tarinfo(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(mtime)
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""  # no user names in a bundle
    return info


def pack(run_dir: str | Path, out_path: str | Path | None, private_key: Ed25519PrivateKey) -> Path:
    """Sign `run_dir` (write_manifest) and write it as a tar.gz bundle; return the bundle's path.

    `out_path` defaults to `<run_dir>.tar.gz` and must lie outside the run directory. Each file is
    hashed again as it goes into the archive: a file that changed since signing is an error.
    """
    root = Path(run_dir)
    out = Path(out_path) if out_path is not None else root.resolve().parent / f"{root.resolve().name}.tar.gz"
    if out.resolve().is_relative_to(root.resolve()):
        raise BundleError(f"the bundle {out} must not be inside the run directory {root}")
    body, _ = write_manifest(root, private_key)
    digests = json.loads(body)["files"]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tar:
            for name in (*MANIFEST_FILES, *digests):
                path = root / name
                st = path.stat()
                with open(path, "rb") as fh:
                    reader = _HashingReader(fh)
                    tar.addfile(_tarinfo(name, st.st_size, st.st_mtime), reader)
                if name in digests and reader.hash.hexdigest() != digests[name]:
                    raise BundleError(f"file {name} changed while packing; is the run still going?")
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise BundleError(f"cannot write bundle {out}: {exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


# ---- unpacking ---------------------------------------------------------------------------------
def _member_kind(member: tarfile.TarInfo) -> str | None:
    """What is wrong with the member's type, or None for a regular file or directory."""
    if member.issym():
        return f"a symlink (to {member.linkname!r})"
    if member.islnk():
        return f"a hard link (to {member.linkname!r})"
    if member.ischr() or member.isblk():
        return "a device file"
    if member.isfifo():
        return "a FIFO"
    if member.issparse():
        return "a sparse file"
    if member.isreg() or member.isdir():
        return None
    return f"of unsupported type {member.type!r}"


# A full disk (or quota) under the extraction target is the extractor's fault, not the bundle's: it is raised
# as the OSError it is, so that a service retries later instead of rejecting the bundle.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _unless_no_space(exc: OSError) -> None:
    if exc.errno in NO_SPACE:
        raise exc


def safe_extract(bundle: str | Path, dest: str | Path, *, max_total_bytes: int = MAX_TOTAL_BYTES,
                 max_file_bytes: int = MAX_FILE_BYTES, max_members: int = MAX_MEMBERS) -> list[str]:
    """Unpack an untrusted bundle into `dest` (absent or empty); return the files' relative paths.

    Refuses, with a BundleError naming the member: absolute paths, `..`, symlinks, hard links,
    device files, FIFOs, duplicate names, a file over `max_file_bytes`, more than
    `max_total_bytes` in all or more than `max_members` members, and input that is not a readable
    (optionally gzip/bz2/xz-compressed) tar. On error nothing is left in `dest`. A full disk under
    `dest` (ENOSPC, EDQUOT) is raised as its OSError: not the bundle's fault.
    The archive is read as a stream, one member at a time.
    """
    dest = Path(dest)
    created = not dest.exists()
    if not created and (not dest.is_dir() or any(dest.iterdir())):
        raise BundleError(f"extraction target {dest} exists and is not an empty directory")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        return _extract(Path(bundle), dest, max_total_bytes, max_file_bytes, max_members)
    except BaseException:
        if created:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            for child in dest.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        raise


def _extract(bundle: Path, dest: Path, max_total: int, max_file: int, max_members: int) -> list[str]:
    seen: set[str] = set()
    files: list[str] = []
    total = 0
    try:
        fh = open(bundle, "rb")
    except OSError as exc:
        raise BundleError(f"cannot read bundle {bundle}: {exc.strerror}") from None
    try:
        with fh, tarfile.open(fileobj=fh, mode="r|*") as tar:
            for count, member in enumerate(tar, start=1):
                name = member.name
                if count > max_members:
                    raise BundleError(f"bundle has more than {max_members} members (at {name!r})")
                if member.isdir() and not _parts(name) and not name.startswith("/"):
                    continue  # "./", as `tar -C RUN_DIR .` writes
                problem = _path_problem(name)
                if problem is not None:
                    raise BundleError(f"member {name!r} has {problem}")
                rel = _safe_relpath(name)
                assert rel is not None
                kind = _member_kind(member)
                if kind is not None:
                    raise BundleError(f"member {name!r} is {kind}; a bundle holds regular files only")
                key = rel.as_posix()
                if rel.parts[0] == LOCAL_DIR:
                    # Packing never bundles local/; a bundle that brings one could bring its own
                    # LEFT_OUT_NAME and have unsigned files pass the manifest check.
                    raise BundleError(f"member {name!r} is under {LOCAL_DIR}/, the site's private files: "
                                      "a bundle never holds them")
                if key in seen:
                    raise BundleError(f"member {name!r} appears twice in the bundle")
                seen.add(key)
                target = dest / rel
                try:
                    if member.isdir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    if member.size > max_file:
                        raise BundleError(f"member {name!r} is {member.size} bytes, over the "
                                          f"{max_file}-byte limit per file")
                    total += member.size
                    if total > max_total:
                        raise BundleError(f"bundle holds more than {max_total} bytes (at member {name!r})")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    src = tar.extractfile(member)
                    assert src is not None  # a regular file
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                    out = os.fdopen(os.open(target, flags, 0o644), "wb")
                except (FileExistsError, NotADirectoryError, IsADirectoryError):
                    raise BundleError(f"member {name!r} clashes with another member's path") from None
                except OSError as exc:
                    _unless_no_space(exc)
                    raise BundleError(f"cannot write {target}: {exc.strerror}") from None
                with out:
                    while chunk := src.read(CHUNK):  # a read error here is a corrupt bundle
                        try:
                            out.write(chunk)
                        except OSError as exc:
                            _unless_no_space(exc)
                            raise BundleError(f"cannot write {target}: {exc.strerror}") from None
                files.append(key)
    except BundleError:
        raise
    except OSError as exc:
        _unless_no_space(exc)  # e.g. a small file's buffered bytes written when it is closed
        raise BundleError(f"{bundle} is not a valid tar bundle or is corrupt ({type(exc).__name__}: {exc})") from None
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, TypeError, ValueError) as exc:
        # tarfile's stream reader answers some corrupt input with bare TypeErrors and ValueErrors (a gzip
        # header cut after 3 bytes: `ord('')`, found by tests/fuzz/test_bundles.py): a corrupt bundle all the same.
        raise BundleError(f"{bundle} is not a valid tar bundle or is corrupt ({type(exc).__name__}: {exc})") from None
    if not files:
        raise BundleError(f"{bundle} holds no files")
    return files
