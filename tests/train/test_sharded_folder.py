"""A packed ImageFolder (data/shards.py) trains on the same batches as the tree it was packed from: same
images, order, labels, crops and flips for a seed, with either decoder, in the loader's workers too; a
pack other than the run's is refused. A pixel pack (`stage --decoded`) holds each image exactly as its
decoder makes it, and one of another decoder is refused. ~15 s."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from aiperf_runner.data import shards
from aiperf_runner.train.data import DataError, DataSpec, build_data

from tests.train.test_data import _png_folder

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


def _spec(root: Path, decoder: str, packed: str | None = None) -> DataSpec:
    dataset = {"name": "imagenet", "classes": 3, "image_size": 24, **({"packed": {"digest": packed}} if packed else {})}
    return DataSpec.from_trial({"preset": "imagenet", "data": str(root), "num_classes": 3, "image_size": 24,
                                "dataset": dataset, "data_decoder": decoder})


def _batches(spec: DataSpec, workers: int, rank: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    data = build_data(spec, batch_size=4, rank=rank, world_size=2, workers=workers, shuffle_seed=11)
    out = []
    for epoch in (0, 1):
        data.train.set_epoch(epoch)
        out += list(data.train)
    return out + list(data.val)


@pytest.fixture(scope="module")
def tree_and_pack(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sharded")
    tree = _png_folder(root / "tree", per_class={"train": 6, "val": 3})
    (tree / "train" / "class1" / "notes.txt").write_text("not an image")  # ImageFolder skips it; so does the pack
    shards.pack(tree, root / "pack", shard_bytes=20_000)
    return tree, root / "pack"


@pytest.mark.parametrize("decoder", ["pil", "tensor"])
def test_same_batches_as_the_tree(tree_and_pack: tuple[Path, Path], decoder: str) -> None:
    tree, pack = tree_and_pack
    assert len(shards.read_manifest(pack)["splits"]["train"]["shards"]) > 1
    for rank in (0, 1):
        want = _batches(_spec(tree, decoder), workers=0, rank=rank)
        have = _batches(_spec(pack, decoder), workers=0, rank=rank)
        assert len(want) == len(have) == 2 * 2 + 2 - rank  # a rank's 9 training images: 2 batches (not the one of 1)
        for (x, y), (x2, y2) in zip(want, have, strict=True):
            assert torch.equal(y, y2) and torch.equal(x, x2)


def test_same_batches_from_loader_workers(tree_and_pack: tuple[Path, Path]) -> None:
    tree, pack = tree_and_pack
    digest = shards.read_manifest(pack)["digest"]
    want = _batches(_spec(tree, "tensor"), workers=0)
    have = _batches(_spec(pack, "tensor", packed=digest), workers=2)  # the reader pickled into the workers
    assert all(torch.equal(x, x2) and torch.equal(y, y2) for (x, y), (x2, y2) in zip(want, have, strict=True))


def test_another_pack_or_a_damaged_one_is_refused(tree_and_pack: tuple[Path, Path], tmp_path: Path) -> None:
    _tree, pack = tree_and_pack
    with pytest.raises(DataError, match="but the run started with 0000000000000000"):
        build_data(_spec(pack, "tensor", packed="0" * 64), batch_size=4, workers=0)
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in pack.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    (copy / "train-00001.shard").write_bytes(b"short")
    with pytest.raises(DataError, match="train-00001.shard: 5 bytes, the manifest says"):
        build_data(_spec(copy, "tensor"), batch_size=4, workers=0)


@pytest.fixture(scope="module")
def tree_and_pixel_packs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """A tree of PNGs and JPEGs (colour, grey, CMYK: each decoder's conversions to RGB), and its pixel packs
    (`stage --decoded`), one per decoder."""
    import numpy as np
    from aiperf_runner.cli.stage import pixel_decoder
    from PIL import Image

    root = tmp_path_factory.mktemp("pixels")
    tree = _png_folder(root / "tree", per_class={"train": 4, "val": 2})
    rng = np.random.default_rng(1)
    for n, mode in enumerate(("RGB", "L", "CMYK", "RGB")):
        pixels = rng.integers(0, 256, (30 + n, 44, 4 if mode == "CMYK" else 3), dtype=np.uint8)
        image = Image.fromarray(pixels[..., :4] if mode == "CMYK" else pixels, "CMYK" if mode == "CMYK" else "RGB")
        (image if mode != "L" else image.convert("L")).save(tree / ("train" if n < 3 else "val") / f"class{n % 3}" /
                                                            f"photo{n}.jpg", quality=85)
    return tree, {name: shards.pack(tree, root / name, shard_bytes=20_000, pixels=pixel_decoder(name)).path
                  for name in ("pil", "tensor")}


@pytest.mark.parametrize("decoder", ["pil", "tensor"])
def test_a_pixel_pack_gives_the_decoders_own_images_and_batches(
        tree_and_pixel_packs: tuple[Path, dict[str, Path]], decoder: str) -> None:
    from aiperf_runner.train import decode
    from aiperf_runner.train.sharded_folder import ShardedImageFolder, bytes_loader

    tree, packs = tree_and_pixel_packs
    manifest = shards.read_manifest(packs[decoder])
    assert manifest["format"] == shards.PIXELS_FORMAT and manifest["pixels"] == decoder
    folder = ShardedImageFolder(packs[decoder], "train", loader=bytes_loader(decoder))
    # ImageFolder's order: class folders, then file names (flat folders here)
    by_order = [str(p) for p in sorted((tree / "train").rglob("*"), key=lambda p: (p.parent.name, p.name)) if p.is_file()]
    assert len(folder) == len(by_order) == 15
    for i, path in enumerate(by_order):  # every image exactly what the decoder makes of its file
        image, _ = folder[i]
        want = decode.read_rgb(path) if decoder == "tensor" else decode.pil_rgb_image(Path(path).read_bytes())
        if decoder == "tensor":
            assert torch.equal(image, want), path
        else:
            assert image.size == want.size and image.tobytes() == want.tobytes(), path
    for rank in (0, 1):
        want = _batches(_spec(tree, decoder), workers=0, rank=rank)
        have = _batches(_spec(packs[decoder], decoder, packed=manifest["digest"]), workers=2 * rank, rank=rank)
        assert all(torch.equal(x, x2) and torch.equal(y, y2) for (x, y), (x2, y2) in zip(want, have, strict=True))


def test_a_pixel_pack_of_another_decoder_is_refused(tree_and_pixel_packs: tuple[Path, dict[str, Path]]) -> None:
    _tree, packs = tree_and_pixel_packs
    with pytest.raises(DataError, match="holds images decoded by pil, but the trial decodes with tensor: run with "
                                        "AIPERF_DATA_DECODER=pil"):
        build_data(_spec(packs["pil"], "tensor"), batch_size=4, workers=0)
