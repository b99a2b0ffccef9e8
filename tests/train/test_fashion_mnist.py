"""The fashion-mnist preset's data: IDX files checked and decoded once, batches augmented, tensors shared."""

from __future__ import annotations

import gzip
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from aiperf_runner.data import idx as idxdata
from aiperf_runner.data.presets import PresetError, get_preset
from aiperf_runner.train.data import CropFlip, DataError, DataSpec, build_data

from tests.helpers import need_service

DEBIAN = Path(idxdata.DEFAULT_DIR)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("AIPERF_CACHE_DIR", str(root))
    return root


@pytest.fixture
def debian() -> Path:
    need_service(all((DEBIAN / f"{name}.gz").exists() for s in idxdata.FILES.values() for name in s[:2]),
                 f"Fashion-MNIST not installed in {DEBIAN} (apt-get install dataset-fashion-mnist)")
    return DEBIAN


def _idx(shape: tuple[int, ...], data: bytes | None = None, kind: int = 0x08) -> bytes:
    header = struct.pack(">HBB", 0, kind, len(shape)) + struct.pack(f">{len(shape)}I", *shape)
    return header + (data if data is not None else bytes(int(np.prod(shape))))


def _copy_files(src: Path, dst: Path, *, gunzip: bool) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for images, labels, _n in idxdata.FILES.values():
        for name in (images, labels):
            if gunzip:
                with gzip.open(src / f"{name}.gz", "rb") as fh:
                    (dst / name).write_bytes(fh.read())
            else:
                shutil.copy(src / f"{name}.gz", dst / f"{name}.gz")
    return dst


def _mapped_file(address: int) -> Path | None:
    """The file mapped at `address` in this process (/proc/self/maps), or None."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if start <= address < end:
            return Path(fields[5]) if len(fields) == 6 else None
    return None


# ---- errors: which file, what was expected, how to get it ----------------------------------------------

def test_missing_directory_names_the_debian_package(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(idxdata.IdxError, match="apt-get install dataset-fashion-mnist") as exc:
        idxdata.load(tmp_path / "nowhere")
    assert "nowhere" in str(exc.value)


def test_missing_file_is_named(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "train-images-idx3-ubyte").write_bytes(_idx((60_000, 28, 28)))
    with pytest.raises(idxdata.IdxError, match=r"train-labels-idx1-ubyte\[\.gz\] is missing.*apt-get install"):
        idxdata.load(tmp_path)


@pytest.mark.parametrize(("content", "message"), [
    (b"\x01\x02\x08\x03" + bytes(12), "not an IDX file"),
    (_idx((60_000, 28, 28), b"", kind=0x0D), "type code 0x0d, expected 0x08"),
    (_idx((60_000, 28), b""), "2 dimension"),
    (_idx((60_000, 28, 27), b""), "shape 60000x28x27, expected 60000x28x28"),
    (_idx((60_000, 28, 28), bytes(1000)), "truncated or padded"),
    (b"\x00\x00", "too short"),
])
def test_malformed_file_says_what_was_expected(tmp_path: Path, cache: Path, content: bytes, message: str) -> None:
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(content)
    with pytest.raises(idxdata.IdxError, match=message) as exc:
        idxdata.read_idx(path, (60_000, 28, 28))
    assert str(path) in str(exc.value)


def test_damaged_gzip_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(_idx((10_000,)))[:40])
    with pytest.raises(idxdata.IdxError, match="cannot be read.*apt-get install"):
        idxdata.read_idx(path, (10_000,))


def test_labels_out_of_range(tmp_path: Path) -> None:
    images = _idx((10_000, 28, 28))
    labels = _idx((10_000,), bytes([12]) * 10_000)
    for name, content in (("t10k-images-idx3-ubyte", images), ("t10k-labels-idx1-ubyte", labels),
                          ("train-images-idx3-ubyte", _idx((60_000, 28, 28))),
                          ("train-labels-idx1-ubyte", _idx((60_000,), bytes(range(10)) * 6_000))):
        (tmp_path / name).write_bytes(content)
    with pytest.raises(idxdata.IdxError, match="t10k-labels-idx1-ubyte: label 12 found, expected labels 0-9"):
        idxdata.decode(tmp_path)


def test_preset_error_at_run_creation(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(PresetError, match="apt-get install dataset-fashion-mnist"):
        get_preset("fashion-mnist").dataset(str(tmp_path))


# ---- the real files -------------------------------------------------------------------------------------

def test_debian_files_decode_once_and_map_from_the_cache(debian: Path, cache: Path) -> None:
    first = idxdata.load()
    assert first.cached is not None and first.cached.parent == cache
    assert first.train.images.shape == (60_000, 28, 28) and first.val.images.shape == (10_000, 28, 28)
    assert np.bincount(first.train.labels).tolist() == [6_000] * 10
    assert np.bincount(first.val.labels).tolist() == [1_000] * 10
    again = idxdata.load()
    assert isinstance(again.train.images, np.memmap)  # mapped, not decoded again
    assert again.sha256 == first.sha256
    mean, std = idxdata.mean_std(first.train.images)
    assert (round(mean, 4), round(std, 4)) == (0.2860, 0.3530)  # the Normalizer's constants


def test_plain_and_gzipped_copies_decode_to_the_same_data(debian: Path, cache: Path, tmp_path: Path) -> None:
    plain = idxdata.load(_copy_files(debian, tmp_path / "plain", gunzip=True))
    gz = idxdata.load(_copy_files(debian, tmp_path / "gz", gunzip=False))
    assert plain.sha256 == gz.sha256 == idxdata.load(debian).sha256
    assert plain.cached != gz.cached  # keyed by the files, not shared by accident


def test_run_json_dataset_block(debian: Path, cache: Path) -> None:
    ds = get_preset("fashion-mnist").dataset(None)
    assert ds == {"name": "fashion-mnist", "train_images": 60_000, "val_images": 10_000, "classes": 10,
                  "image_size": 28, "channels": 1, "sha256": idxdata.load().sha256}


def test_loaders_share_the_map_and_augment_training_batches(debian: Path, cache: Path) -> None:
    spec = DataSpec("fashion-mnist", 10, 28, channels=1)
    data = build_data(spec, batch_size=256, rank=1, world_size=2)
    assert (data.train_size, data.val_size) == (60_000, 10_000)
    mapped = idxdata.load()
    # The tensors are views of the cache's memory map (page cache, shared by every process that
    # maps it): no copy per process or per rank.
    assert _mapped_file(data.train.images.untyped_storage().data_ptr()) == mapped.cached / "train-images.npy"
    assert _mapped_file(data.val.images.untyped_storage().data_ptr()) == mapped.cached / "val-images.npy"
    torch.manual_seed(0)
    images, labels = next(iter(data.train))
    assert images.shape == (256, 1, 28, 28) and images.dtype == torch.uint8 and labels.dtype == torch.int64
    val_images, _ = next(iter(data.val))
    assert torch.equal(val_images[0, 0], torch.from_numpy(np.array(mapped.val.images[1])))  # rank 1: index 1
    assert sum(len(b[1]) for b in data.val) == 5_000
    x = data.normalizer(val_images)
    assert x.dtype == torch.float32 and x.shape == (256, 1, 28, 28)


def test_changed_data_is_refused(debian: Path, cache: Path) -> None:
    with pytest.raises(DataError, match="the data changed during the run"):
        build_data(DataSpec("fashion-mnist", 10, 28, channels=1, sha256="0" * 64), batch_size=8)


# ---- augmentation ---------------------------------------------------------------------------------------

def test_crop_flip_matches_padding_then_crop_then_flip() -> None:
    torch.manual_seed(1)
    x = torch.randint(0, 256, (64, 1, 28, 28), dtype=torch.uint8)
    torch.manual_seed(7)
    out = CropFlip(3)(x)
    torch.manual_seed(7)  # the same draws, applied image by image
    dy = torch.randint(0, 7, (64, 1))
    dx = torch.randint(0, 7, (64, 1))
    flip = torch.rand(64, 1) < 0.5
    padded = torch.nn.functional.pad(x, (3, 3, 3, 3))
    for i in range(64):
        crop = padded[i, :, dy[i, 0]:dy[i, 0] + 28, dx[i, 0]:dx[i, 0] + 28]
        assert torch.equal(out[i], crop.flip(-1) if flip[i, 0] else crop)
    assert 10 < int(flip.sum()) < 54 and len(set(dy.flatten().tolist())) == 7
    unpadded = CropFlip(0)(x)  # no padding: each image unchanged or mirrored
    assert all(torch.equal(u, v) or torch.equal(u, v.flip(-1)) for u, v in zip(unpadded, x, strict=True))
