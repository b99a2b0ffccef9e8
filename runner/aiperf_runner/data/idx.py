"""Fashion-MNIST from its four IDX files: checked, decoded once, shared between processes.

Debian's `dataset-fashion-mnist` installs the files gzipped under `/usr/share/datasets/fashion-mnist`;
`--data DIR` may hold the same four files, gzipped or not:

    train-images-idx3-ubyte[.gz]  60,000 x 28 x 28 uint8     train-labels-idx1-ubyte[.gz]  60,000 uint8
    t10k-images-idx3-ubyte[.gz]   10,000 x 28 x 28 uint8     t10k-labels-idx1-ubyte[.gz]   10,000 uint8

IDX: two zero bytes, a type code (0x08 = unsigned byte), the number of dimensions, each dimension
as a big-endian uint32, then the data, row-major. Every file is checked (magic, type, shape, exact
length, labels below the class count) and a bad one is named with what was expected.

The decoded arrays (55 MB) are written once to a cache directory as `.npy` files and memory-mapped
by every process that trains on them: the data-parallel ranks of a trial, and the trials of every
slot on the node, read the same page-cache pages instead of each holding a copy. The cache is keyed
by the source files' paths, sizes and modification times, built in a temporary directory and
renamed into place (concurrent builders are harmless), and carries the SHA-256 of the decoded
data, which run.json's `dataset.sha256` records. Without a writable cache directory each process
decodes the files itself.

numpy only (no torch): the controller checks the files before the run starts.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aiperf_runner.spec.errors import AiperfError

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
INSTALL_HINT = "install it with `apt-get install dataset-fashion-mnist`, or pass --data DIR holding the four files"
CLASSES = 10
IMAGE_SHAPE = (28, 28)
# split -> (images file, labels file, images)
FILES: dict[str, tuple[str, str, int]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", 60_000),
    "val": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", 10_000),
}
CACHE_FORMAT = "aiperf-idx-cache/1"
_UBYTE = 0x08


class IdxError(AiperfError, ValueError):
    """A missing or malformed IDX file; the message names the file and what was expected."""


@dataclass(frozen=True)
class Split:
    images: np.ndarray  # uint8 (N, 28, 28), possibly a read-only memory map
    labels: np.ndarray  # uint8 (N,)


@dataclass(frozen=True)
class FashionMnist:
    train: Split
    val: Split
    sha256: str  # of the decoded arrays, in the order train images, train labels, val images, val labels
    cached: Path | None  # the cache directory the arrays are mapped from (None: decoded in memory)


def data_dir(data: str | os.PathLike[str] | None) -> Path:
    """The directory to read: `--data` when given, else the Debian package's."""
    return Path(data) if data else Path(DEFAULT_DIR)


def find_file(root: Path, name: str) -> Path:
    """`root/name` or `root/name.gz` (the plain file wins when both exist)."""
    if not root.is_dir():
        raise IdxError(f"Fashion-MNIST: no directory {root} (expected the four IDX files there); {INSTALL_HINT}")
    for candidate in (root / name, root / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise IdxError(f"Fashion-MNIST: {root / name}[.gz] is missing (expected one of the four IDX files "
                   f"{', '.join(f for s in FILES.values() for f in s[:2])}); {INSTALL_HINT}")


def _open(path: Path):  # noqa: ANN202 - a binary file object, gzip or plain
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")


def _parse_header(path: Path, head: bytes, dims: int) -> tuple[int, ...]:
    if len(head) < 4:
        raise IdxError(f"{path}: {len(head)} bytes, too short for an IDX header (4 bytes, then the dimensions)")
    zero, kind, ndim = struct.unpack(">HBB", head[:4])
    if zero != 0:
        raise IdxError(f"{path}: not an IDX file (the first two bytes are {head[:2].hex()}, expected 0000)")
    if kind != _UBYTE:
        raise IdxError(f"{path}: IDX type code 0x{kind:02x}, expected 0x08 (unsigned byte)")
    if ndim != dims:
        raise IdxError(f"{path}: {ndim} dimension(s), expected {dims}")
    if len(head) < 4 + 4 * dims:
        raise IdxError(f"{path}: the header ends before its {dims} dimension sizes")
    return struct.unpack(f">{dims}I", head[4:4 + 4 * dims])


def read_idx(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    """The whole file as a uint8 array of exactly `shape` (IdxError otherwise)."""
    header = 4 + 4 * len(shape)
    try:
        with _open(path) as fh:
            raw = fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise IdxError(f"{path}: cannot be read ({type(exc).__name__}: {exc}); a truncated or damaged "
                       f"download? {INSTALL_HINT}") from None
    dims = _parse_header(path, raw[:header], len(shape))
    if dims != shape:
        raise IdxError(f"{path}: shape {'x'.join(map(str, dims))}, expected {'x'.join(map(str, shape))}")
    want = header + int(np.prod(shape))
    if len(raw) != want:
        raise IdxError(f"{path}: {len(raw)} bytes after decompression, expected {want} "
                       f"(header + {'x'.join(map(str, shape))} bytes): truncated or padded")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def decode(root: Path) -> tuple[dict[str, Split], str]:
    """Read and check the four files of `root`; (splits, SHA-256 of the decoded arrays)."""
    splits: dict[str, Split] = {}
    digest = hashlib.sha256()
    for split, (images_name, labels_name, n) in FILES.items():
        images_path, labels_path = find_file(root, images_name), find_file(root, labels_name)
        images = read_idx(images_path, (n, *IMAGE_SHAPE))
        labels = read_idx(labels_path, (n,))
        top = int(labels.max())
        if top >= CLASSES:
            raise IdxError(f"{labels_path}: label {top} found, expected labels 0-{CLASSES - 1}")
        missing = sorted(set(range(CLASSES)) - set(np.unique(labels).tolist()))
        if missing:
            raise IdxError(f"{labels_path}: no image of class(es) {missing}; expected all {CLASSES} classes")
        digest.update(images.tobytes())
        digest.update(labels.tobytes())
        splits[split] = Split(images, labels)
    return splits, digest.hexdigest()


# ---- the cache -------------------------------------------------------------------------------------

def cache_root() -> Path:
    """$AIPERF_CACHE_DIR, else $XDG_CACHE_HOME/aiperf, else ~/.cache/aiperf."""
    env = os.environ.get("AIPERF_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "aiperf"


def _cache_key(root: Path) -> str:
    h = hashlib.sha256(CACHE_FORMAT.encode())
    for images_name, labels_name, _n in FILES.values():
        for name in (images_name, labels_name):
            path = find_file(root, name).resolve()
            st = path.stat()
            h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:24]


def _names(split: str) -> tuple[str, str]:
    return f"{split}-images.npy", f"{split}-labels.npy"


def _load_cached(folder: Path) -> FashionMnist | None:
    try:
        meta = json.loads((folder / "meta.json").read_text())
        if meta.get("format") != CACHE_FORMAT:
            return None
        splits = {}
        for split, (_i, _l, n) in FILES.items():
            images_name, labels_name = _names(split)
            # mode "c": copy-on-write, so torch gets a writable array without a copy; nothing writes to it
            images = np.load(folder / images_name, mmap_mode="c")
            labels = np.load(folder / labels_name, mmap_mode="c")
            if images.shape != (n, *IMAGE_SHAPE) or labels.shape != (n,) or images.dtype != np.uint8:
                return None
            splits[split] = Split(images, labels)
        return FashionMnist(splits["train"], splits["val"], str(meta["sha256"]), folder)
    except (OSError, ValueError, KeyError):
        return None


def _write_cache(folder: Path, splits: dict[str, Split], sha256: str) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        for split, arrays in splits.items():
            images_name, labels_name = _names(split)
            np.save(tmp / images_name, np.ascontiguousarray(arrays.images))
            np.save(tmp / labels_name, np.ascontiguousarray(arrays.labels))
        (tmp / "meta.json").write_text(json.dumps({"format": CACHE_FORMAT, "sha256": sha256}) + "\n")
        try:
            os.rename(tmp, folder)
        except OSError:  # another process built it first: theirs is as good
            if not (folder / "meta.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load(data: str | os.PathLike[str] | None = None, *, use_cache: bool = True) -> FashionMnist:
    """Fashion-MNIST from `data` (default: the Debian package's directory), memory-mapped from the
    cache (built on first use) when it can be, else decoded into this process's memory."""
    root = data_dir(data)
    if use_cache:
        folder = cache_root() / f"fashion-mnist-{_cache_key(root)}"
        found = _load_cached(folder)
        if found is not None:
            return found
    splits, sha256 = decode(root)
    if use_cache:
        try:
            _write_cache(folder, splits, sha256)
            found = _load_cached(folder)
            if found is not None:
                return found
        except OSError as exc:
            print(f"fashion-mnist: no cache at {folder} ({exc}); every process decodes the files itself",
                  file=sys.stderr)
    return FashionMnist(splits["train"], splits["val"], sha256, None)


def mean_std(images: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of the pixels on the [0, 1] scale."""
    x = images.astype(np.float64) / 255.0
    return float(x.mean()), float(x.std())


__all__ = ["CLASSES", "DEFAULT_DIR", "FILES", "IMAGE_SHAPE", "INSTALL_HINT", "FashionMnist", "IdxError", "Split",
           "cache_root", "data_dir", "decode", "find_file", "load", "mean_std", "read_idx"]
