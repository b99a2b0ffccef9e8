"""What `pack --list` tells of a run directory, and the masked copies of the trials' raw output that
`pack` adds.

What a bundle holds is the allow-list `spec/bundle.py` `BUNDLED` (the files the runner writes for it);
anything else in the run directory is left out and listed with why. The trials' `stdout.log` /
`stderr.log` are written by the trial program and by the scheduler directly (tracebacks, NCCL
messages, the node a job ran on): the runner cannot mask them as they are written. They stay in the
run directory, never bundled; `pack` writes beside each a masked copy of its last `bundle.PUBLIC_LOG_BYTES`
(`stdout.public.log`, `stderr.public.log`), which the bundle holds. Verification reads neither.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aiperf_runner.rundir.privacy import Masker, run_masker
from aiperf_runner.spec import bundle

RAW_LOGS = ("stdout.log", "stderr.log")


def public_name(raw: str) -> str:
    """`stdout.log` -> `stdout.public.log`."""
    stem, _, ext = raw.rpartition(".")
    return f"{stem}.public.{ext}"


def _tail(path: Path) -> bytes:
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - bundle.PUBLIC_LOG_BYTES))
        data = fh.read()
    if size > bundle.PUBLIC_LOG_BYTES:
        data = data.split(b"\n", 1)[-1]  # from a whole line
        data = f"[... the first {size - len(data)} bytes left out ...]\n".encode() + data
    return data


def public_logs(run_dir: str | Path, masker: Masker | None = None) -> dict[str, bytes]:
    """{relative path of the masked copy: its bytes} for every raw trial log of the run."""
    root = Path(run_dir)
    masker = masker or run_masker(root)
    out: dict[str, bytes] = {}
    for raw in RAW_LOGS:
        for path in sorted(root.glob(f"trials/*/{raw}")):
            if path.is_symlink() or not path.is_file():
                continue
            text = _tail(path).decode("utf-8", errors="replace")
            rel = path.relative_to(root).with_name(public_name(raw)).as_posix()
            out[rel] = masker.text(text).encode()
    return out


def write_public_logs(run_dir: str | Path) -> list[str]:
    """Write the masked copies (a copy whose bytes are unchanged is left alone); their paths."""
    root = Path(run_dir)
    copies = public_logs(root)
    for rel, data in copies.items():
        path = root / rel
        if path.is_file() and path.read_bytes() == data:
            continue
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return sorted(copies)


def listing(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every file of the run directory: path, size, whether the bundle holds it, and why (not).

    The bundle's files come first (the manifest files, then sorted), those left out after them.
    The masked copies are listed with the size they will have (nothing is written).
    """
    root = Path(run_dir)
    held = bundle.run_files(root)  # the same checks as packing (symlinks, special files)
    copies = public_logs(root)
    rows: list[dict[str, Any]] = []
    for rel in [*bundle.MANIFEST_FILES, *sorted(set(held) | set(copies))]:
        rows.append({"path": rel, "size": _size(root, rel, copies), "bundled": True,
                     "why": bundle.why_bundled(rel)})
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            reason = bundle.left_out(rel)
            if reason is not None:
                rows.append({"path": rel, "size": (root / rel).stat().st_size, "bundled": False, "why": reason})
    return rows


def _size(root: Path, rel: str, copies: dict[str, bytes]) -> int | None:
    """A bundled file's size: a masked copy's as it will be written; None for one pack has not written yet."""
    if rel in copies:
        return len(copies[rel])
    path = root / rel
    return path.stat().st_size if path.exists() else None
