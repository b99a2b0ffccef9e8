"""The `device` decoder (train/devdecode.py): on the CPU its batches are the `tensor` decoder's bit for bit,
from a tree and from a pack, in the loader's workers too; what it cannot hand over as a JPEG is decoded in
the workers; its tolerance check and the stage/pixel-pack refusals. (On a GPU: scripts/gpu-checks.sh.)"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from aiperf_runner.data import shards
from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.train import devdecode
from aiperf_runner.train.data import DataError, DataSpec, build_data, folder_transforms
from PIL import Image

from tests.train.test_decoders import _jpeg_folder, photo

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


def _jpeg_bytes(image: Image.Image, **options: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", **options)
    return out.getvalue()


def test_the_frame_header_gives_the_size_of_what_decode_jpeg_reads() -> None:
    image = photo(np.random.default_rng(1), 90, 70)
    assert devdecode.jpeg_size(_jpeg_bytes(image, quality=90)) == (70, 90)
    assert devdecode.jpeg_size(_jpeg_bytes(image, progressive=True)) == (70, 90)
    assert devdecode.jpeg_size(_jpeg_bytes(image.convert("L"))) == (70, 90)
    assert devdecode.jpeg_size(_jpeg_bytes(image.convert("CMYK"))) is None  # 4 components: decoded in the worker
    png = io.BytesIO()
    image.save(png, "PNG")
    assert devdecode.jpeg_size(png.getvalue()) is None
    assert devdecode.jpeg_size(_jpeg_bytes(image)[:40]) is None  # cut before its frame header
    assert devdecode.jpeg_size(b"\xff\xd8\xff\xe0garbage") is None


def _with_cmyk(root: Path) -> Path:
    photo(np.random.default_rng(3), 100, 80).convert("CMYK").save(root / "train" / "class0" / "cmyk.jpg", quality=90)
    return root


def _spec(root: Path, decoder: str, name: str = "imagenet", packed: str | None = None) -> DataSpec:
    dataset = {"name": name, "classes": 2, "image_size": 32, **({"packed": {"digest": packed}} if packed else {})}
    return DataSpec.from_trial({"preset": name, "data": str(root), "num_classes": 2, "image_size": 32,
                                "dataset": dataset, "data_decoder": decoder})


def _epochs(spec: DataSpec, workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    data = build_data(spec, batch_size=4, rank=1, world_size=2, workers=workers, shuffle_seed=7)
    out = []
    for epoch in (0, 1):
        data.train.set_epoch(epoch)
        out += list(data.train)
    return out + list(data.val)


def _same(a: list[tuple[torch.Tensor, torch.Tensor]], b: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) and torch.equal(s, t) for (x, s), (y, t) in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """JPEGs (colour, grey, one CMYK) and PNGs in an ImageFolder tree."""
    return _with_cmyk(_jpeg_folder(tmp_path_factory.mktemp("device") / "data", per_class={"train": 5, "val": 3}))


def test_on_the_cpu_the_batches_are_the_tensor_decoders(tree: Path) -> None:
    tensor = _epochs(_spec(tree, "tensor"), workers=0)
    device = _epochs(_spec(tree, "device"), workers=0)
    assert all(x.dtype == torch.uint8 and x.shape[1:] == (3, 32, 32) for x, _ in device)
    assert _same(tensor, device)
    assert _same(tensor, _epochs(_spec(tree, "device"), workers=2))  # boxes drawn in worker processes
    assert not _same(tensor, _epochs(_spec(tree, "pil"), workers=0))  # (the check can tell decoders apart)


def test_cifar_and_a_pack_give_the_same_batches(tree: Path, tmp_path: Path) -> None:
    assert _same(_epochs(_spec(tree, "tensor", "cifar"), 0), _epochs(_spec(tree, "device", "cifar"), 0))
    manifest = shards.pack(tree, tmp_path / "pack", shard_bytes=30_000).manifest
    packed = _spec(tmp_path / "pack", "device", packed=manifest["digest"])
    assert _same(_epochs(_spec(tree, "device"), 0), _epochs(packed, 2))


def test_a_broken_jpeg_fails_loudly(tmp_path: Path) -> None:
    root = _jpeg_folder(tmp_path / "data", per_class={"train": 3, "val": 2})
    path = next((root / "val" / "class0").glob("img0.jpg"))
    path.write_bytes(path.read_bytes()[:300])  # its header parses; its scan is cut short
    data = build_data(_spec(root, "device"), batch_size=8, workers=0)
    with pytest.raises(Exception, match="(?i)image|jpeg|truncated"):
        list(data.val)


def test_the_tolerance_check(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images = devdecode.first_images(build_data(_spec(tree, "device"), batch_size=4, workers=0).val.loader.dataset)
    assert len(images) == 6
    reference = folder_transforms("imagenet", 32)[1]
    assert devdecode.tolerance_problem(images, "imagenet", 32, torch.device("cpu"), reference) is None
    monkeypatch.setattr(devdecode, "TOLERANCE_MAX", 0)  # torch's resampling is a level off Pillow's here and there
    problem = devdecode.tolerance_problem(images, "imagenet", 32, torch.device("cpu"), reference)
    assert problem and "at most 1" in problem and "AIPERF_DATA_DECODER=tensor" in problem


def test_no_pixel_pack_of_the_device_decoder(tree: Path, tmp_path: Path) -> None:
    from aiperf_runner.cli.stage import pixel_decoder

    with pytest.raises(AiperfError, match="decodes in the run"):
        pixel_decoder("device")
    manifest = shards.pack(tree, tmp_path / "pixels", shard_bytes=30_000, pixels=pixel_decoder("tensor")).manifest
    with pytest.raises(DataError, match="decoded by tensor"):
        build_data(_spec(tmp_path / "pixels", "device", packed=manifest["digest"]), batch_size=4, workers=0)
