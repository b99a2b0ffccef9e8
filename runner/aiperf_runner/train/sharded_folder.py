"""`ShardedImageFolder`: one split of a packed ImageFolder (data/shards.py, `aiperf-runner stage`) as a
dataset: the same images, classes and order as torchvision's ImageFolder over the tree it was packed
from, each read from its shard's memory map and decoded from its bytes by the trial's decoder, or, from a
pixel pack (`stage --decoded`), taken as the pixels that decoder made at staging.

`build_data` (data.py) uses it when the data root holds a pack, with the same transforms, seeding
(SeededImages), samplers and loaders as the tree: for a seed, the same batches. At module level so
that DataLoader workers can pickle it (the reader re-opens its maps in each worker).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aiperf_runner.data import shards

from . import decode


def bytes_loader(decoder: str) -> Callable[[bytes | memoryview], Any]:
    """The decoder's loader of an image's bytes: `pil` PIL's RGB image (torchvision's pil_loader), `tensor`
    a uint8 tensor (decode.py `decode_rgb`, what `read_rgb` does with a file), `device` the bytes for the
    device (devdecode.py `encoded`, what `read_encoded` does with a file)."""
    if decoder == "device":
        from . import devdecode

        return devdecode.encoded
    return decode.pil_rgb_image if decoder == "pil" else decode.decode_rgb


def pixels_loader(decoder: str) -> Callable[[bytes | memoryview, int, int], Any]:
    """The decoder's loader of a pixel pack's image (bytes, height, width): what `bytes_loader` returns."""
    return decode.PIXEL_CODECS[decoder][1]


class ShardedImageFolder(torch.utils.data.Dataset):
    """ImageFolder's interface (`classes`, `class_to_idx`, `targets`, `samples`, `__getitem__` ->
    (transform(image), class)) over one split of a pack."""

    def __init__(self, root: str | Path, split: str, transform: Any = None,
                 loader: Callable[[bytes | memoryview], Any] = decode.decode_rgb, manifest: dict[str, Any] | None = None) -> None:
        """`loader`: the decoder's `bytes_loader`; a pixel pack's images are loaded by its decoder's
        `pixels_loader` instead."""
        self.reader = shards.ShardReader(root, split, manifest)
        self.root, self.split, self.transform, self.loader = str(root), split, transform, loader
        self.pixels = pixels_loader(self.reader.pixels) if self.reader.pixels else None
        self.classes = self.reader.classes
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.targets = self.reader.targets

    @property
    def samples(self) -> list[tuple[str, int]]:
        """(`<split>#<i>`, class) per image: a sample has no file of its own in a pack."""
        return [(f"{self.split}#{i}", t) for i, t in enumerate(self.targets)]

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        data, target = self.reader.read(index)
        image = self.pixels(data, *self.reader.shape(index)) if self.pixels else self.loader(data)
        return (self.transform(image) if self.transform is not None else image), target


def packed_sets(root: str | Path, decoder: str, train_tf: Any, val_tf: Any,
                digest: str | None = None) -> tuple[ShardedImageFolder, ShardedImageFolder]:
    """The pack's training and validation sets, after the quick check (data/shards.py `verify`: sizes, the
    index); `digest`: the pack the run started with (run.json `dataset.packed.digest`), which this one
    must be. A pixel pack must hold `decoder`'s images. ShardError when it cannot be used."""
    manifest = shards.verify(root)
    if digest and manifest["digest"] != digest:
        raise shards.ShardError(f"the pack at {root} has digest {manifest['digest'][:16]}..., but the run started "
                                f"with {digest[:16]}... (run.json dataset.packed): stage the run's data again")
    if manifest.get("pixels") not in (None, decoder):
        raise shards.ShardError(f"the pack at {root} holds images decoded by {manifest['pixels']}, but the trial "
                                f"decodes with {decoder}: run with AIPERF_DATA_DECODER={manifest['pixels']}, or stage "
                                "the data again")
    loader = bytes_loader(decoder)
    return (ShardedImageFolder(root, "train", train_tf, loader, manifest),
            ShardedImageFolder(root, "val", val_tf, loader, manifest))
