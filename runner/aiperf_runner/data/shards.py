"""Packed ImageFolder data (`aiperf-runner stage`): a data set as a few large shard files and a manifest.

A pack holds, per split (`train`, `val`), the image files' bytes concatenated into shards of about
`shard_bytes` each (`train-00000.shard`, ...), in torchvision ImageFolder's order (sorted class
folders, then `sorted(os.walk(...))`, then sorted file names: `folder_samples`), and:

- `<split>.index.npy`: the per-image table, one int64 row (shard, offset, length, class) per image
  (32 bytes: 42 MB for ImageNet's 1.33 million images, memory-mapped, read in no time);
- `aiperf-shards.json`, the manifest: the format, the classes, per split its image count, its shards
  (name, sha256, bytes, images) and its index file (name, sha256, bytes), and `digest`, the SHA-256
  of the manifest without it (canonical JSON). The digest binds everything: run.json's
  `dataset.packed.digest` names the very bytes the run read, in their order, with their labels.

A pixel pack (`stage --decoded`, format `aiperf-pixels/1`) holds each image decoded at staging by a
run decoder (train/decode.py) instead of its file's bytes: interleaved RGB, uint8, row-major (H x W x 3),
the decoder's very output, so a trial reads the pixels it would have decoded and spends no time decoding
(about 6.4 times the bytes of ImageNet-sized JPEGs). Its manifest names the decoder (`pixels`); its index
rows have two more columns, height and width.

Nothing in the manifest depends on where or when the pack was made, so every node packing the same
tree gets the same digest. A trial reads a pack through `ShardReader` (one memory map per shard,
read sequentially by the loader's workers): no per-file metadata traffic on a parallel file system.

`pack` writes into a temporary directory next to the destination and renames it when complete, so
a killed pack never leaves a half pack under the final name; run on a destination that already
holds a complete pack it writes nothing and verifies it instead (`verify`).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aiperf_runner.data.staging import IMG_EXTENSIONS, SPLITS, locked
from aiperf_runner.rundir.config import PIXEL_DECODERS
from aiperf_runner.spec.errors import AiperfError

FORMAT = "aiperf-shards/1"
PIXELS_FORMAT = "aiperf-pixels/1"
MANIFEST = "aiperf-shards.json"
DEFAULT_SHARD_BYTES = 256 << 20
_CHUNK = 8 << 20  # hashing buffer
_COLUMNS = 4  # index row: shard, offset, length, class
_PIXEL_COLUMNS = 6  # a pixel pack's: shard, offset, length, class, height, width


class ShardError(AiperfError, ValueError):
    """A tree that cannot be packed, or a pack that is incomplete, damaged or not one."""


# ---- the source tree, as ImageFolder sees it ---------------------------------------------------------

def find_classes(split_dir: Path) -> list[str]:
    """torchvision `find_classes`: the sorted names of the split's sub-directories."""
    return sorted(e.name for e in os.scandir(split_dir) if e.is_dir())


def folder_samples(split_dir: Path, classes: list[str]) -> list[tuple[str, int]]:
    """(path, class number) of every image, in torchvision `make_dataset`'s order; ShardError for a class
    with none (ImageFolder refuses it too)."""
    out: list[tuple[str, int]] = []
    for target, cls in enumerate(classes):
        found = False
        for root, _dirs, names in sorted(os.walk(split_dir / cls, followlinks=True)):
            for name in sorted(names):
                if name.lower().endswith(IMG_EXTENSIONS):
                    out.append((os.path.join(root, name), target))
                    found = True
        if not found:
            raise ShardError(f"{split_dir / cls}: no image (ImageFolder takes {', '.join(IMG_EXTENSIONS)})")
    return out


@dataclass(frozen=True)
class PixelDecoder:
    """How a pixel pack is decoded at staging: `name`, the run decoder whose images these are (one of
    PIXEL_DECODERS), and `decode`, an image file's bytes -> (H x W x 3 RGB bytes, height, width)."""

    name: str
    decode: Callable[[bytes], tuple[bytes, int, int]]


# ---- writing ---------------------------------------------------------------------------------------------

def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _split_into_shards(sizes: list[int], shard_bytes: int) -> list[tuple[int, int]]:
    """[start, end) sample ranges of consecutive shards of about `shard_bytes` (an image never spans two)."""
    ranges, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        if total and total + size > shard_bytes:
            ranges.append((start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        ranges.append((start, len(sizes)))
    return ranges


def _write_shard(path: Path, files: list[str], sizes: list[int]) -> str:
    """The files' bytes concatenated into `path`; its sha256. ShardError when a file's size changed."""
    h = hashlib.sha256()
    with open(path, "wb") as out:
        for name, size in zip(files, sizes, strict=True):
            with open(name, "rb") as fh:
                data = fh.read()
            if len(data) != size:
                raise ShardError(f"{name}: {len(data)} bytes, {size} when the tree was scanned (changed while packed?)")
            h.update(data)
            out.write(data)
    return h.hexdigest()


def _decoded_size(path: str) -> int:
    """An image's decoded bytes (width x height x 3) from its header: only to cut the shards."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            return img.width * img.height * 3
    except (OSError, ValueError) as exc:
        raise ShardError(f"{path}: not an image this pack can decode: {exc}") from None


def _write_pixel_shard(path: Path, files: list[str], pixels: PixelDecoder) -> tuple[str, list[tuple[int, int, int]]]:
    """The files decoded by `pixels` into `path`; (its sha256, (bytes, height, width) per image)."""
    h = hashlib.sha256()
    rows = []
    with open(path, "wb") as out:
        for name in files:
            with open(name, "rb") as fh:
                data = fh.read()
            try:
                raw, height, width = pixels.decode(data)
            except Exception as exc:  # the decoders' own errors (RuntimeError, OSError, ...): name the file
                raise ShardError(f"{name}: the {pixels.name} decoder cannot decode it: {exc}") from None
            if len(raw) != height * width * 3:
                raise ShardError(f"{name}: decoded to {len(raw)} bytes, not {height} x {width} x 3")
            h.update(raw)
            out.write(raw)
            rows.append((len(raw), height, width))
    return h.hexdigest(), rows


def _pack_pixels(src: Path, tmp: Path, split: str, classes: list[str], shard_bytes: int,
                 pool: ThreadPoolExecutor, pixels: PixelDecoder) -> dict[str, Any]:
    """One split decoded into a pixel pack's shards (decoded in parallel, one shard per thread)."""
    samples = folder_samples(src / split, classes)
    ranges = _split_into_shards(list(pool.map(lambda s: _decoded_size(s[0]), samples)), shard_bytes)
    names = [f"{split}-{n:05d}.shard" for n in range(len(ranges))]
    written = list(pool.map(lambda r: _write_pixel_shard(tmp / names[r[0]], [p for p, _t in samples[r[1][0]:r[1][1]]],
                                                         pixels), enumerate(ranges)))
    table = np.zeros((len(samples), _PIXEL_COLUMNS), dtype=np.int64)
    for n, ((a, b), (_sha, rows)) in enumerate(zip(ranges, written, strict=True)):
        lengths = [r[0] for r in rows]
        table[a:b, 0] = n
        table[a:b, 1] = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)])
        table[a:b, 2] = lengths
        table[a:b, 4] = [r[1] for r in rows]
        table[a:b, 5] = [r[2] for r in rows]
    table[:, 3] = [t for _p, t in samples]
    shards = [{"name": name, "sha256": sha, "bytes": int(sum(r[0] for r in rows)), "images": b - a}
              for name, (sha, rows), (a, b) in zip(names, written, ranges, strict=True)]
    return _with_index(tmp, split, table, shards)


def _with_index(tmp: Path, split: str, table: np.ndarray, shards: list[dict[str, Any]]) -> dict[str, Any]:
    index = tmp / f"{split}.index.npy"
    np.save(index, table, allow_pickle=False)
    return {"images": len(table), "shards": shards,
            "index": {"name": index.name, "sha256": _sha256_file(index), "bytes": index.stat().st_size}}


def _pack_split(src: Path, tmp: Path, split: str, classes: list[str], shard_bytes: int,
                pool: ThreadPoolExecutor) -> dict[str, Any]:
    samples = folder_samples(src / split, classes)
    sizes = list(pool.map(lambda s: os.stat(s[0]).st_size, samples))  # parallel: a parallel FS's latency
    table = np.zeros((len(samples), _COLUMNS), dtype=np.int64)
    ranges = _split_into_shards(sizes, shard_bytes)
    names = [f"{split}-{n:05d}.shard" for n in range(len(ranges))]
    for n, (a, b) in enumerate(ranges):
        table[a:b, 0] = n
        table[a:b, 1] = np.concatenate([[0], np.cumsum(sizes[a:b - 1], dtype=np.int64)])
    table[:, 2] = sizes
    table[:, 3] = [t for _p, t in samples]
    digests = list(pool.map(lambda r: _write_shard(tmp / names[r[0]], [p for p, _t in samples[r[1][0]:r[1][1]]],
                                                   sizes[r[1][0]:r[1][1]]), enumerate(ranges)))
    shards = [{"name": name, "sha256": sha, "bytes": int(sum(sizes[a:b])), "images": b - a}
              for name, sha, (a, b) in zip(names, digests, ranges, strict=True)]
    return _with_index(tmp, split, table, shards)


def manifest_digest(manifest: dict[str, Any]) -> str:
    """SHA-256 of the manifest without its `digest` (canonical JSON: sorted keys, no spaces)."""
    body = {k: v for k, v in manifest.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass
class PackResult:
    """What `pack` did: `packed` False when the destination held a complete pack (verified, not rewritten)."""

    path: Path
    manifest: dict[str, Any]
    packed: bool
    seconds: float

    @property
    def images(self) -> int:
        return sum(int(s["images"]) for s in self.manifest["splits"].values())

    @property
    def shards(self) -> int:
        return sum(len(s["shards"]) for s in self.manifest["splits"].values())

    @property
    def bytes(self) -> int:
        return sum(int(sh["bytes"]) for s in self.manifest["splits"].values() for sh in s["shards"])


def pack(src: str | Path, dst: str | Path, shard_bytes: int = DEFAULT_SHARD_BYTES, workers: int = 8,
         full: bool = False, pixels: PixelDecoder | None = None) -> PackResult:
    """Pack the ImageFolder tree `src` (train/ and val/ of class folders) into `dst`, the files' bytes or, with
    `pixels`, their images decoded; an existing complete pack there is verified instead (`full`: its shards'
    sha256 too), and refused if it is not the kind asked for."""
    src, dst = Path(src), Path(dst)
    start = time.monotonic()
    dst.parent.mkdir(parents=True, exist_ok=True)
    with locked(dst.parent / f".{dst.name}.lock"):
        if dst.exists():
            if not (dst / MANIFEST).is_file():
                raise ShardError(f"{dst} exists and is not a pack (no {MANIFEST}): remove it or choose another --to")
            manifest = verify(dst, full=full)
            wanted = {"pixels": pixels.name} if pixels else {}
            if manifest.get("pixels") != wanted.get("pixels"):
                raise ShardError(f"{dst} holds {describe(manifest)}, not {describe(wanted)}: remove it or choose "
                                 "another --to")
            return PackResult(dst, manifest, False, time.monotonic() - start)
        for stale in dst.parent.glob(f".{dst.name}.tmp-*"):  # a killed pack's (made under the lock only)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = dst.parent / f".{dst.name}.tmp-{os.getpid()}"
        try:
            tmp.mkdir()
            manifest = _pack_tree(src, tmp, shard_bytes, workers, pixels)
            os.rename(tmp, dst)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return PackResult(dst, manifest, True, time.monotonic() - start)


def describe(manifest: dict[str, Any]) -> str:
    """What a pack holds, in words."""
    return f"images decoded by {manifest['pixels']}" if manifest.get("pixels") else "the files' bytes"


def _pack_tree(src: Path, tmp: Path, shard_bytes: int, workers: int, pixels: PixelDecoder | None) -> dict[str, Any]:
    for split in SPLITS:
        if not (src / split).is_dir():
            raise ShardError(f"{src}: no {split}/ directory (expected {src}/{split}/<class>/<image>)")
    classes = find_classes(src / "train")
    if not classes:
        raise ShardError(f"{src}/train has no class folders")
    if find_classes(src / "val") != classes:
        raise ShardError(f"{src}/val and {src}/train have different class folders")
    with ThreadPoolExecutor(max(1, workers)) as pool:  # reads, hashes and torch's decoders release the GIL
        splits = {split: _pack_pixels(src, tmp, split, classes, max(1, shard_bytes), pool, pixels) if pixels
                  else _pack_split(src, tmp, split, classes, max(1, shard_bytes), pool) for split in SPLITS}
    manifest: dict[str, Any] = {"format": FORMAT, "classes": classes, "splits": splits}
    if pixels:
        manifest.update(format=PIXELS_FORMAT, pixels=pixels.name)
    manifest["digest"] = manifest_digest(manifest)
    (tmp / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")
    return manifest


# ---- checking --------------------------------------------------------------------------------------------

def read_manifest(root: str | Path) -> dict[str, Any]:
    """The pack's manifest, its digest checked; ShardError when it is missing, malformed or altered."""
    return read_manifest_file(Path(root) / MANIFEST)


def read_manifest_file(path: Path) -> dict[str, Any]:
    """A manifest read from any file (a copy on shared storage: `stage --manifest-to`), its digest checked."""
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ShardError(f"{path}: cannot be read: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in (FORMAT, PIXELS_FORMAT):
        raise ShardError(f"{path}: not a manifest of format {FORMAT} or {PIXELS_FORMAT}")
    if (manifest["format"] == PIXELS_FORMAT) != (manifest.get("pixels") is not None) or \
            manifest.get("pixels", PIXEL_DECODERS[0]) not in PIXEL_DECODERS:
        raise ShardError(f"{path}: format {manifest['format']} with pixels {manifest.get('pixels')!r} (a pixel pack "
                         f"names its decoder, one of {', '.join(PIXEL_DECODERS)}; a pack of files names none)")
    if manifest.get("digest") != manifest_digest(manifest):
        raise ShardError(f"{path}: its digest does not match its content (edited?)")
    return manifest


def is_pack(root: str | Path | None) -> bool:
    return bool(root) and (Path(str(root)) / MANIFEST).is_file()


def verify(root: str | Path, full: bool = False) -> dict[str, Any]:
    """The manifest of the pack at `root` once checked: its digest, every file's size, each index's sha256
    and its rows against the shards. `full`: every shard's sha256 too (reading the whole pack: minutes for
    ImageNet's 150 GB, so not by default; sizes catch a truncated or unfinished copy)."""
    root = Path(root)
    manifest = read_manifest(root)
    for split, info in manifest["splits"].items():
        index = root / info["index"]["name"]
        _check_size(index, int(info["index"]["bytes"]))
        if _sha256_file(index) != info["index"]["sha256"]:
            raise ShardError(f"{index}: sha256 differs from the manifest's")
        table = np.load(index, mmap_mode="r", allow_pickle=False)
        _check_table(split, table, info, len(manifest["classes"]), bool(manifest.get("pixels")))
        for shard in info["shards"]:
            path = root / shard["name"]
            _check_size(path, int(shard["bytes"]))
            if full and _sha256_file(path) != shard["sha256"]:
                raise ShardError(f"{path}: sha256 differs from the manifest's (damaged)")
    return manifest


def _check_size(path: Path, want: int) -> None:
    try:
        have = path.stat().st_size
    except OSError as exc:
        raise ShardError(f"{path}: {exc.strerror or exc}") from None
    if have != want:
        raise ShardError(f"{path}: {have} bytes, the manifest says {want}")


def _check_table(split: str, table: np.ndarray, info: dict[str, Any], classes: int, pixels: bool = False) -> None:
    """The index's rows fit the shards: counts per shard, each image inside its shard, classes in range; a
    pixel pack's lengths are its heights x widths x 3."""
    shards = info["shards"]
    if table.shape != (int(info["images"]), _PIXEL_COLUMNS if pixels else _COLUMNS):
        raise ShardError(f"{split} index: shape {table.shape}, the manifest says {info['images']} images")
    if len(table) == 0:
        return
    shard, offset, length, target = (np.asarray(table[:, c]) for c in range(_COLUMNS))
    counts = np.bincount(shard, minlength=len(shards)) if shard.min() >= 0 else None
    sizes = np.array([int(s["bytes"]) for s in shards], dtype=np.int64)
    if counts is None or len(counts) != len(shards) or list(counts) != [int(s["images"]) for s in shards]:
        raise ShardError(f"{split} index: its images per shard differ from the manifest's")
    if (offset < 0).any() or (length < 0).any() or (offset + length > sizes[shard]).any():
        raise ShardError(f"{split} index: an image lies outside its shard")
    if target.min() < 0 or target.max() >= classes:
        raise ShardError(f"{split} index: a class number outside 0..{classes - 1}")
    if pixels and ((table[:, 4] < 1).any() or (table[:, 5] < 1).any() or (length != table[:, 4] * table[:, 5] * 3).any()):
        raise ShardError(f"{split} index: an image's bytes are not its height x width x 3")


# ---- reading ---------------------------------------------------------------------------------------------

class ShardReader:
    """One split of a pack: `len`, `read(i) -> (bytes, class)`, `targets`; a pixel pack's `pixels` (its
    decoder) and `shape(i) -> (height, width)`. Memory maps are made lazily in the process that reads, and
    dropped when pickled (DataLoader workers open their own)."""

    def __init__(self, root: str | Path, split: str, manifest: dict[str, Any] | None = None) -> None:
        self.root, self.split = Path(root), split
        manifest = manifest if manifest is not None else read_manifest(root)
        info = manifest["splits"][split]
        self.classes: list[str] = list(manifest["classes"])
        self.digest: str = manifest["digest"]
        self.pixels: str | None = manifest.get("pixels")
        self._shard_names = [str(s["name"]) for s in info["shards"]]
        self._index_name = str(info["index"]["name"])
        self._n = int(info["images"])
        self._table: np.ndarray | None = None
        self._maps: dict[int, mmap.mmap] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_table": None, "_maps": {}}

    def __len__(self) -> int:
        return self._n

    @property
    def table(self) -> np.ndarray:
        if self._table is None:
            self._table = np.load(self.root / self._index_name, mmap_mode="r", allow_pickle=False)
        return self._table

    @property
    def targets(self) -> list[int]:
        return [int(t) for t in self.table[:, 3]]

    def _map(self, shard: int) -> mmap.mmap:
        m = self._maps.get(shard)
        if m is None:
            # A pixel pack's map is copy-on-write, so that its images can be handed out as writable views
            # (torch.frombuffer) without a copy; nothing ever reaches the file.
            access = mmap.ACCESS_COPY if self.pixels else mmap.ACCESS_READ
            with open(self.root / self._shard_names[shard], "rb") as fh:
                m = mmap.mmap(fh.fileno(), 0, access=access)
            self._maps[shard] = m
        return m

    def shape(self, i: int) -> tuple[int, int]:
        """A pixel pack's image `i`: (height, width)."""
        row = self.table[i]
        return int(row[4]), int(row[5])

    def read(self, i: int) -> tuple[bytes | memoryview, int]:
        """Image `i`'s file bytes and class number; a pixel pack's pixels as a writable view of its shard's
        map, not a copy (only the pages a crop touches are then read)."""
        if not 0 <= i < self._n:
            raise IndexError(f"image {i} of {self._n}")
        shard, offset, length, target = (int(v) for v in self.table[i][:_COLUMNS])
        if self.pixels:
            return memoryview(self._map(shard))[offset:offset + length], target
        return self._map(shard)[offset:offset + length], target
