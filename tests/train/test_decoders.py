"""The ImageFolder decoders (train/decode.py): `tensor` against the `pil` reference, seeded augmentation,
image formats, and a small ImageFolder loaded through build_data with each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from aiperf_runner.rundir.config import ControllerError, RunConfig
from aiperf_runner.spec.proof import sample_seed
from aiperf_runner.train import decode
from aiperf_runner.train.data import DataError, DataSpec, build_data, folder_decoding, folder_transforms
from PIL import Image
from torchvision.datasets.folder import pil_loader
from torchvision.transforms import v2 as T

SIZE = 64  # imagenet's transforms at 64: resize 73, crop 64

# Torch's uint8 antialiased bilinear resize reproduces Pillow's to a level: bench/data_path.py measures the
# validation outputs 0.002 levels apart on average (max 1) on 2,000 ImageNet-sized JPEGs, these tests' images
# 0.006 (max 1). Training crops (same boxes, some enlarged) 0.05 on average, the worst image 0.24 (max 2).
VAL_MEAN_BOUND, VAL_MAX_BOUND = 0.05, 2
TRAIN_MEAN_BOUND = 0.5

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


def photo(rng: np.random.Generator, width: int = 160, height: int = 120) -> Image.Image:
    """A smooth random field plus noise: an image with a photograph's mix of edges and flat parts."""
    field = rng.normal(0.0, 1.0, (height // 10, width // 10, 3)).astype(np.float32)
    planes = [np.asarray(Image.fromarray(field[:, :, c], mode="F").resize((width, height), Image.Resampling.BICUBIC))
              for c in range(3)]
    pixels = 128 + 60 * np.stack(planes, axis=-1) + rng.normal(0.0, 8.0, (height, width, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("jpegs")
    paths = []
    for i in range(12):
        path = root / f"img{i}.jpg"
        photo(rng, 160 + 8 * i, 120 + 4 * (i % 5)).save(path, "JPEG", quality=90)
        paths.append(str(path))
    return paths


def seeded(transform: Any, image: Any, seed: int) -> torch.Tensor:
    """As SeededImages applies a training transform (data.py)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        out: torch.Tensor = transform(image)
        return out


def test_tensor_path_gives_uint8_square_images(jpegs: list[str]) -> None:
    for name in ("imagenet", "cifar"):
        train, val = decode.tensor_transforms(name, SIZE)
        image = decode.read_rgb(jpegs[0])
        assert image.dtype == torch.uint8 and image.shape == (3, 120, 160)
        for out in (seeded(train, image, 1), val(image)):
            assert out.dtype == torch.uint8 and out.shape == (3, SIZE, SIZE) and out.is_contiguous()


def test_same_seed_same_crop_and_flip(jpegs: list[str]) -> None:
    train, _ = decode.tensor_transforms("imagenet", SIZE)
    image = decode.read_rgb(jpegs[3])
    seeds = [sample_seed(7, 0, i) for i in range(8)]
    first = [seeded(train, image, s) for s in seeds]
    again = [seeded(train, image, s) for s in seeds]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert len({bytes(x.numpy()) for x in first}) == len(seeds)  # other seeds, other crops


def _diff(a: torch.Tensor, b: torch.Tensor) -> tuple[float, int]:
    d = (a.int() - b.int()).abs()
    return float(d.float().mean()), int(d.max())


def test_tensor_path_is_close_to_the_pil_reference(jpegs: list[str]) -> None:
    """Validation: the same pixels within resampling; training: the same seed draws the same box and
    flip in both paths, so they differ by resampling alone."""
    for name in ("imagenet", "cifar"):
        pil_train, pil_val = folder_transforms(name, SIZE)
        train, val = decode.tensor_transforms(name, SIZE)
        for i, path in enumerate(jpegs):
            mean, peak = _diff(pil_val(pil_loader(path)), val(decode.read_rgb(path)))
            assert mean < VAL_MEAN_BOUND and peak <= VAL_MAX_BOUND, (name, path, mean, peak)
            seed = sample_seed(3, 1, i)
            mean, _ = _diff(seeded(pil_train, pil_loader(path), seed), seeded(train, decode.read_rgb(path), seed))
            assert mean < TRAIN_MEAN_BOUND, (name, path, mean)


def test_crop_box_draws_as_torchvision() -> None:
    """The box of `crop_box` is torchvision's RandomResizedCrop's, draw for draw."""
    crop = T.RandomResizedCrop(SIZE)
    for seed in range(200):
        height, width = 40 + seed % 90, 30 + (7 * seed) % 150
        torch.manual_seed(seed)
        ours, our_next = decode.crop_box(height, width), float(torch.rand(1))
        torch.manual_seed(seed)
        theirs = crop.make_params([torch.empty(3, height, width, dtype=torch.uint8)])
        assert ours == (theirs["top"], theirs["left"], theirs["height"], theirs["width"])
        assert our_next == float(torch.rand(1))  # the flip's draw: the same point of the stream


@pytest.mark.parametrize("mode,fmt", [("L", "JPEG"), ("RGB", "PNG"), ("RGBA", "PNG"), ("L", "PNG"), ("P", "PNG"),
                                      ("RGB", "BMP"), ("CMYK", "JPEG")])
def test_formats_decode_to_rgb(tmp_path: Path, mode: str, fmt: str) -> None:
    """Grey and palette images expanded, alpha dropped (as PIL's convert("RGB")); BMP through PIL."""
    image = photo(np.random.default_rng(1), 48, 40).convert(mode)
    path = tmp_path / f"img.{fmt.lower()}"
    image.save(path, fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    ours = decode.read_rgb(str(path))
    reference = T.PILToTensor()(pil_loader(str(path)))
    assert ours.dtype == torch.uint8 and ours.shape == (3, 40, 48)
    mean, peak = _diff(ours, reference)
    if fmt == "JPEG" and mode == "CMYK":  # colour conversions differ; the image must still be the image
        assert mean < 20, mean
    else:
        assert peak <= 1, (mode, fmt, mean, peak)
    _, val = decode.tensor_transforms("imagenet", 32)
    assert val(ours).shape == (3, 32, 32)


def test_an_unreadable_file_fails_loudly(tmp_path: Path) -> None:
    path = tmp_path / "broken.jpg"
    path.write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    with pytest.raises(Exception):  # noqa: B017 - PIL's error, as the pil path raises it
        decode.read_rgb(str(path))


# ---- through build_data -----------------------------------------------------------------------------

def _jpeg_folder(root: Path, classes: int = 2, per_class: dict[str, int] | None = None) -> Path:
    rng = np.random.default_rng(2)
    for split, n in (per_class or {"train": 6, "val": 3}).items():
        for c in range(classes):
            d = root / split / f"class{c}"
            d.mkdir(parents=True)
            for i in range(n):
                image = photo(rng, 96 + 4 * i, 72)
                if i == 1:
                    image.convert("L").save(d / f"img{i}.jpg", quality=90)  # a grey JPEG among them
                elif i == 2:
                    image.save(d / f"img{i}.png")
                else:
                    image.save(d / f"img{i}.jpg", quality=90)
    return root


def _batches(loader: Any, epoch: int) -> list[torch.Tensor]:
    loader.set_epoch(epoch)
    return [x for x, _ in loader]


def test_build_data_with_the_tensor_decoder(tmp_path: Path) -> None:
    from aiperf_runner.spec.seeds import small_resnet
    from aiperf_runner.train.builder import build_module

    root = _jpeg_folder(tmp_path / "data")
    spec = DataSpec.from_trial({"preset": "imagenet", "data": str(root), "num_classes": 2, "image_size": 32,
                                "dataset": {"name": "imagenet", "classes": 2, "image_size": 32},
                                "data_decoder": "tensor"})
    assert spec.decoder == "tensor"
    data = build_data(spec, batch_size=4, workers=0, shuffle_seed=5)
    assert data.train_size == 12 and data.val_size == 6
    model = build_module(small_resnet(2, 32, width=8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data.train.set_epoch(0)
    for images, labels in data.train:
        assert images.dtype == torch.uint8 and images.shape[1:] == (3, 32, 32)
        loss = torch.nn.functional.cross_entropy(model(data.normalizer(images)), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
    # Every image from its own seed: the same batches again, in another loader, and in worker processes.
    again = build_data(spec, batch_size=4, workers=0, shuffle_seed=5)
    workers = build_data(spec, batch_size=4, workers=2, shuffle_seed=5)
    first = _batches(data.train, 1)
    assert all(torch.equal(a, b) for a, b in zip(first, _batches(again.train, 1), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(first, _batches(workers.train, 1), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, _batches(again.train, 2), strict=True))
    assert sum(len(x) for x, _ in data.val) == 6


def test_the_decoders_load_the_same_data(tmp_path: Path) -> None:
    root = _jpeg_folder(tmp_path / "data", per_class={"train": 4, "val": 3})
    loaded = {}
    for decoder in decode.DATA_DECODERS:
        spec = DataSpec("imagenet", 2, 32, root=str(root), decoder=decoder)
        d = build_data(spec, batch_size=64, workers=0, shuffle_seed=1)
        loaded[decoder] = (torch.cat(_batches(d.train, 0)), torch.cat([x for x, _ in d.val]))
    for split in (0, 1):
        mean, _ = _diff(loaded["pil"][split], loaded["tensor"][split])
        assert mean < TRAIN_MEAN_BOUND, (split, mean)


def test_choosing_the_decoder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trial = {"preset": "cifar", "data": str(tmp_path), "num_classes": 2, "image_size": 32}
    assert DataSpec.from_trial(trial).decoder == "pil"  # a trial.json from before the choice: PIL's
    assert DataSpec.from_trial({**trial, "data_decoder": "tensor"}).decoder == "tensor"
    assert DataSpec.audited({**trial, "data_decoder": "tensor"}, {"name": "cifar", "classes": 2, "image_size": 32},
                            str(tmp_path)).decoder == "tensor"  # the audit decodes as the trial did
    monkeypatch.delenv("AIPERF_DATA_DECODER", raising=False)
    assert decode.default_decoder() == "tensor"
    assert folder_decoding(DataSpec("cifar", 2, 32))[2] is decode.read_rgb
    monkeypatch.setenv("AIPERF_DATA_DECODER", "pil")
    assert decode.default_decoder() == "pil"
    assert folder_decoding(DataSpec("cifar", 2, 32))[2] is not decode.read_rgb
    with pytest.raises(DataError, match="decoder"):
        folder_decoding(DataSpec("cifar", 2, 32, decoder="simd"))


def test_run_config_decoder() -> None:
    assert RunConfig.from_json({"preset": "imagenet"}).data_decoder == "pil"  # a run from before the choice
    assert RunConfig.from_json({"preset": "imagenet", "data_decoder": "tensor"}).data_decoder == "tensor"
    RunConfig(data_decoder="tensor").check()
    with pytest.raises(ControllerError, match="AIPERF_DATA_DECODER"):
        RunConfig(data_decoder="simd").check()
