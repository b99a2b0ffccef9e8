"""What a bundle holds, and the masked copies of the trials' raw output that `pack` adds.

The trials' `stdout.log` / `stderr.log` are written by the trial program and by the scheduler
directly (tracebacks, NCCL messages, the node a job ran on): the runner cannot mask them as they
are written. They stay in the run directory, never bundled; `pack` writes beside each a masked
copy of its last `PUBLIC_LOG_BYTES` (`stdout.public.log`, `stderr.public.log`), which the bundle
holds. Verification reads neither.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any

from aiperf_runner.privacy import Masker, run_masker
from aiperf_runner.spec import bundle

PUBLIC_LOG_BYTES = 16 << 10  # per log: keeps a 12-hour 512-slot bundle under the upload limit (log-format.md)
RAW_LOGS = ("stdout.log", "stderr.log")

WHY = (
    ("run.json", "what was run, on what, with which settings (verify reads it)"),
    ("events.jsonl", "the signed, hash-chained event log: the score is recomputed from it"),
    ("trials/*/events.jsonl", "the trial's own hash-chained log (its epochs and result)"),
    ("trials/*/graph.json", "the trial's architecture: FLOPs per image are computed from it"),
    ("trials/*/hparams.json", "the trial's hyper-parameters (checked against the log; the audit re-evaluates)"),
    ("trials/*/trial.json", "the trial's settings (the audit re-evaluates the trial with them)"),
    ("trials/*/*.public.log", f"the last {PUBLIC_LOG_BYTES >> 10} KiB of the trial's output, hosts and paths "
                              "masked (for reading failures; not used by verify)"),
    ("MANIFEST.json", "the SHA-256 of every other file listed here (written by pack)"),
    ("MANIFEST.sig", "the site key's signature of MANIFEST.json (written by pack)"),
)


def why_bundled(rel: str) -> str:
    for pattern, why in WHY:
        if fnmatch.fnmatchcase(rel, pattern):
            return why
    return "a file of the run directory (every file not excluded is signed and bundled)"


def public_name(raw: str) -> str:
    """`stdout.log` -> `stdout.public.log`."""
    stem, _, ext = raw.rpartition(".")
    return f"{stem}.public.{ext}"


def _tail(path: Path) -> bytes:
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - PUBLIC_LOG_BYTES))
        data = fh.read()
    if size > PUBLIC_LOG_BYTES:
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

    The masked copies are listed with the size they will have (nothing is written).
    """
    root = Path(run_dir)
    bundle.run_files(root)  # the same checks as packing (symlinks, special files)
    copies = public_logs(root)
    rows: list[dict[str, Any]] = []
    for rel in [*bundle.MANIFEST_FILES, *sorted(set(bundle.run_files(root)) | set(copies))]:
        size = len(copies[rel]) if rel in copies else (root / rel).stat().st_size if (root / rel).exists() else None
        rows.append({"path": rel, "size": size, "bundled": True, "why": why_bundled(rel)})
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            reason = bundle.not_bundled(rel)
            if reason is not None:
                rows.append({"path": rel, "size": (root / rel).stat().st_size, "bundled": False, "why": reason})
    return rows
