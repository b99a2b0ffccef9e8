"""Staged data (`run --stage-data DIR`): the data set copied to node-local storage, checked, indexed.

At the run's start the controller scans the data root (`--data`) once and writes, in the run
directory's never-bundled `local/`:

- `data-index.json`: the index, every regular file's relative path and size and, for ImageFolder
  data, each split's classes and samples (relative path, class number) in torchvision's order;
- `data-manifest.json`: the source root, the file count, the total bytes and `digest`, the SHA-256
  of the index (canonical JSON), which run.json `data_source` publishes.

Each trial process, before it loads data (`stage_for_trial`), on its own node:

1. expands the stage directory (`%n`: the node's name, SLURMD_NODENAME or the host name, so that
   nodes sharing a file system, or the test cluster's nodes on one machine, keep distinct copies);
2. under an exclusive lock (`flock` on `.aiperf-data-<digest>.lock` there) copies the files the
   index lists into a temporary directory, checks it, and renames it to `aiperf-data-<digest>`:
   a trial starting at the same moment on the node waits for the lock and finds the copy made; a
   killed copy never takes the final name. An existing copy (from an earlier job or run with the
   same data) is reused;
3. once per allocation (SLURM_JOB_ID; the run without SLURM) checks the copy against the index:
   file count, every path and size, and the ImageFolder class folders. A copy that differs is
   refused (`StageError`, naming the node and the first differences): the attempt fails with that
   reason in the log, and nothing trains on it. The controller then stops using the node
   (`refused_node`; run/controller.py, `Backend.exclude_node`). The operator removes the copy to stage again.

Trials then read the staged copy, with the ImageFolder samples from the index (no rescan of the
tree; train/indexed_folder.py `IndexedImageFolder`). The check is of paths and sizes, not of contents: hashing a
hundred gigabytes per node per allocation would cost more than the training it protects.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from aiperf_runner.spec.bundle import LOCAL_DIR
from aiperf_runner.spec.errors import AiperfError

FORMAT = "aiperf-data-index/1"
INDEX_NAME = "data-index.json"
MANIFEST_NAME = "data-manifest.json"
STAGED_PREFIX = "aiperf-data-"
KINDS = ("folder", "idx")  # ImageFolder (train/ and val/ of class folders), IDX files (fashion-mnist)
SPLITS = ("train", "val")
# torchvision.datasets.folder.IMG_EXTENSIONS (the unit test checks they agree): the files an
# ImageFolder takes as samples. Kept here so that the controller needs no torchvision.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
SHOWN_DIFFERENCES = 3


class StageError(AiperfError, RuntimeError):
    """Staged data that cannot be used (a copy that does not match the manifest, no space...)."""


# ---- the index --------------------------------------------------------------------------------------

def scan_files(root: Path) -> list[tuple[str, int]]:
    """(relative POSIX path, size) of every regular file under `root`, symbolic links followed as
    ImageFolder follows them, sorted by path."""
    out: list[tuple[str, int]] = []
    for dirpath, _dirs, names in os.walk(root, followlinks=True):
        for name in names:
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:
                continue  # a dangling link: ImageFolder would not read it either
            if stat.S_ISREG(st.st_mode):
                out.append((Path(os.path.relpath(path, root)).as_posix(), st.st_size))
    out.sort()
    return out


def folder_classes(root: Path, files: list[tuple[str, int]]) -> dict[str, Any]:
    """Per split, the classes (torchvision `find_classes`: sorted folder names) and the samples
    (torchvision `make_dataset` order: by class, then by folder, then by file name)."""
    out: dict[str, Any] = {}
    for split in SPLITS:
        split_dir = root / split
        classes = sorted(e.name for e in os.scandir(split_dir) if e.is_dir()) if split_dir.is_dir() else []
        number = {c: i for i, c in enumerate(classes)}
        samples: list[tuple[str, str, str, int]] = []
        for rel, _size in files:
            parts = rel.split("/")
            if len(parts) >= 3 and parts[0] == split and parts[1] in number and rel.lower().endswith(IMG_EXTENSIONS):
                folder, name = rel.rsplit("/", 1)
                samples.append((parts[1], folder, name, number[parts[1]]))
        samples.sort(key=lambda s: (number[s[0]], s[1], s[2]))
        out[split] = {"classes": classes,
                      "samples": [[f"{folder[len(split) + 1:]}/{name}", target] for _c, folder, name, target in samples]}
    return out


def build_index(root: str | Path, kind: str) -> dict[str, Any]:
    """The index of a data root: its files and sizes, and for ImageFolder data its classes and samples."""
    if kind not in KINDS:
        raise ValueError(f"cannot stage {kind!r} data (stageable: {', '.join(KINDS)})")
    root = Path(root)
    if not root.is_dir():
        raise StageError(f"{root}: not a directory")
    files = scan_files(root)
    index: dict[str, Any] = {"format": FORMAT, "kind": kind, "files": [[p, s] for p, s in files]}
    if kind == "folder":
        index["folders"] = folder_classes(root, files)
    return index


def digest(index: dict[str, Any]) -> str:
    """Hex SHA-256 of the index as canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(index, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def manifest_of(index: dict[str, Any], source: str | Path) -> dict[str, Any]:
    files = index["files"]
    out = {"format": FORMAT, "kind": index["kind"], "source": os.path.abspath(source), "files": len(files),
           "bytes": sum(int(s) for _p, s in files), "digest": digest(index)}
    if "folders" in index:
        out["classes"] = len(index["folders"]["train"]["classes"])
    return out


def differences(want: dict[str, Any], have: dict[str, Any]) -> list[str]:
    """What differs between two indexes, in words (the first few of each kind)."""
    out: list[str] = []
    wanted, found = dict(map(tuple, want["files"])), dict(map(tuple, have["files"]))
    if len(wanted) != len(found):
        out.append(f"{len(found)} files instead of {len(wanted)}")
    missing = sorted(set(wanted) - set(found))
    extra = sorted(set(found) - set(wanted))
    resized = sorted(p for p in set(wanted) & set(found) if wanted[p] != found[p])
    shown = {"missing": missing, "unexpected": extra,
             "wrong size": [f"{p} ({found[p]} bytes, not {wanted[p]})" for p in resized]}
    for what, items in shown.items():
        if items:
            more = f" and {len(items) - SHOWN_DIFFERENCES} more" if len(items) > SHOWN_DIFFERENCES else ""
            out.append(f"{what}: {', '.join(items[:SHOWN_DIFFERENCES])}{more}")
    for split in SPLITS:
        a = (want.get("folders") or {}).get(split, {}).get("classes")
        b = (have.get("folders") or {}).get(split, {}).get("classes")
        if a != b:
            out.append(f"{split}/ has class folders {(b or [])[:5]}..., not {(a or [])[:5]}...")
    if not out and digest(want) != digest(have):
        out.append("the ImageFolder samples differ")
    return out


# ---- the controller's side -----------------------------------------------------------------------------

# What the node's copy or its storage is to blame for; not a source that changed since the run
# started (every node would refuse it: retrying elsewhere cannot help).
_REFUSED = re.compile(r"\bStageError: node (\S+?): (?!the data under )")


def refused_node(error: str, nodes: Sequence[str], host: Callable[[str], str]) -> str | None:
    """The node of an attempt (`nodes`: raw names) whose staged data a trial's error text says was
    refused (`StageError: node NAME: ...`), or None when the failure was not that. The trial names
    its node as the log does (`host`: raw name -> pseudonym) or raw; an attempt on one node that
    names another (a host name the backend does not use, as `localhost` for the local backend's
    slot) is that node's."""
    found = _REFUSED.search(error)
    if found is None:
        return None
    named = found.group(1)
    for node in nodes:
        if named in (node, node.split(".", 1)[0], host(node)):
            return node
    return nodes[0] if len(nodes) == 1 else None


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def prepare(run_dir: str | Path, source: str | Path, kind: str) -> dict[str, Any]:
    """Scan `source` once and write the index and the manifest into the run's `local/`; the manifest.
    A resumed run keeps the ones it started with (its trials must see the same data)."""
    local = Path(run_dir) / LOCAL_DIR
    if (local / MANIFEST_NAME).is_file() and (local / INDEX_NAME).is_file():
        return read_manifest(run_dir)
    index = build_index(source, kind)
    if not index["files"]:
        raise StageError(f"{source}: no files to stage")
    manifest = manifest_of(index, source)
    local.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_json(local / INDEX_NAME, index)
    _write_json(local / MANIFEST_NAME, manifest)
    return manifest


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    return dict(json.loads((Path(run_dir) / LOCAL_DIR / MANIFEST_NAME).read_text()))


def read_index(run_dir: str | Path) -> dict[str, Any]:
    return dict(json.loads((Path(run_dir) / LOCAL_DIR / INDEX_NAME).read_text()))


def public_record(manifest: dict[str, Any], stage_dir: str | None, masker: Any) -> dict[str, Any]:
    """run.json `data_source`: where the data came from (paths masked as the run's) and its digest."""
    return {"source": masker.text(str(manifest["source"])), "staged_to": masker.text(stage_dir) if stage_dir else None,
            "kind": manifest["kind"], "files": manifest["files"], "bytes": manifest["bytes"],
            "index_sha256": manifest["digest"]}


def start_run(run_dir: str | Path, preset: str, data_format: str, data: str | None, stage_dir: str | None,
              masker: Any) -> dict[str, Any] | None:
    """At a run's start with --stage-data: the data root scanned once, its index and manifest
    written; run.json's `data_source`. None when the run does not stage; StageError for a run
    that cannot."""
    if not stage_dir:
        return None
    if data_format == "generated":
        raise StageError(f"preset {preset!r} generates its data; there is nothing to stage")
    if not os.path.isabs(stage_dir):
        raise StageError(f"{stage_dir}: give an absolute path (a directory on each node)")
    if data_format == "idx":
        from aiperf_runner.data import idx as idxdata

        source, kind = str(idxdata.data_dir(data)), "idx"
    else:
        source, kind = str(data), "folder"
    try:
        manifest = prepare(run_dir, source, kind)
    except OSError as exc:
        raise StageError(f"{source}: {exc}") from None
    return public_record(manifest, stage_dir, masker)


# ---- the node's side ---------------------------------------------------------------------------------

def node_name() -> str:
    """This node's name: SLURMD_NODENAME in a SLURM job (the test cluster runs several on one
    host), else the short host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".", 1)[0]


def expand(template: str, node: str) -> Path:
    """The stage directory of `node`: `%n` is its name, `%%` a percent sign."""
    return Path(template.replace("%%", "\0").replace("%n", node).replace("\0", "%"))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (flock): whoever comes second waits, then finds the first one's work."""
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _copy(source: Path, dest: Path, index: dict[str, Any]) -> None:
    """The files the index lists (and the ImageFolder class folders, empty ones too) into `dest`."""
    for split, info in (index.get("folders") or {}).items():
        for cls in info["classes"]:
            (dest / split / cls).mkdir(parents=True, exist_ok=True)
    for rel, _size in index["files"]:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, target)


def stage(source: str | Path, stage_dir: str | Path, index: dict[str, Any], allocation: str,
          node: str | None = None) -> Path:
    """The checked copy of the data on this node (made if there is none); StageError when a copy
    there does not match the index."""
    node = node or node_name()
    want = digest(index)
    root = Path(stage_dir)
    name = STAGED_PREFIX + want[:16]
    target = root / name
    try:
        root.mkdir(parents=True, exist_ok=True)
        with locked(root / f".{name}.lock"):
            checked = root / f".{name}.checked-{allocation}"
            if not target.exists():
                # Copies are made under the lock only: one left now is a killed stager's.
                for stale in root.glob(f".{name}.tmp-*"):
                    shutil.rmtree(stale, ignore_errors=True)
                tmp = root / f".{name}.tmp-{os.getpid()}"
                try:
                    _copy(Path(source), tmp, index)
                    problems = differences(index, build_index(tmp, index["kind"]))
                    if problems:
                        raise StageError(f"node {node}: the data under {source} changed since the run started "
                                         f"({'; '.join(problems)})")
                    os.rename(tmp, target)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                checked.touch()
            elif not checked.exists():
                problems = differences(index, build_index(target, index["kind"]))
                if problems:
                    raise StageError(f"node {node}: the staged copy {target} does not match the run's data manifest "
                                     f"(digest {want[:16]}...): {'; '.join(problems)}. Refused: nothing trains "
                                     "on it; remove it to stage the data again")
                checked.touch()
    except OSError as exc:
        raise StageError(f"node {node}: cannot stage the data into {root}: {exc}") from None
    return target


def allocation_key(run_dir: str | Path) -> str:
    """What a check holds for: the SLURM job (a trial's job, or the slurm-steps allocation), else the run."""
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        return f"job{job}"
    try:
        run_id = str(json.loads((Path(run_dir) / "run.json").read_text()).get("run_id") or "")
    except (OSError, ValueError):
        run_id = ""
    return "run" + (run_id[:16] or hashlib.sha256(os.path.abspath(run_dir).encode()).hexdigest()[:16])


def stage_for_trial(run_dir: str | Path) -> Path | None:
    """In a trial process: the staged copy of the run's data on this node, or None when the run
    does not stage (no `stage_data` in local/private.json). StageError when it is refused."""
    from aiperf_runner.rundir.privacy import read_private

    template = read_private(run_dir).get("stage_data")
    if not template:
        return None
    try:
        manifest, index = read_manifest(run_dir), read_index(run_dir)
    except (OSError, ValueError) as exc:
        raise StageError(f"the run's data manifest cannot be read: {exc}") from None
    if digest(index) != manifest.get("digest"):
        raise StageError("the run's data index does not match its manifest's digest")
    node = node_name()
    return stage(manifest["source"], expand(str(template), node), index, allocation_key(run_dir), node)
