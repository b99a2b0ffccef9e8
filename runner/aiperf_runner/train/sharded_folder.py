"""`ShardedImageFolder`: one split of a packed ImageFolder (data/shards.py, `aiperf-runner stage`) as a
dataset: the same images, classes and order as torchvision's ImageFolder over the tree it was packed
from, each read from its shard's memory map and decoded from its bytes by the trial's decoder.

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


def bytes_loader(decoder: str) -> Callable[[bytes], Any]:
    """The decoder's loader of an image's bytes: `pil` PIL's RGB image (torchvision's pil_loader), `tensor`
    a uint8 tensor (decode.py `decode_rgb`, what `read_rgb` does with a file)."""
    return decode.pil_rgb_image if decoder == "pil" else decode.decode_rgb


class ShardedImageFolder(torch.utils.data.Dataset):
    """ImageFolder's interface (`classes`, `class_to_idx`, `targets`, `samples`, `__getitem__` ->
    (transform(image), class)) over one split of a pack."""

    def __init__(self, root: str | Path, split: str, transform: Any = None,
                 loader: Callable[[bytes], Any] = decode.decode_rgb, manifest: dict[str, Any] | None = None) -> None:
        self.reader = shards.ShardReader(root, split, manifest)
        self.root, self.split, self.transform, self.loader = str(root), split, transform, loader
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
        image = self.loader(data)
        return (self.transform(image) if self.transform is not None else image), target


def packed_sets(root: str | Path, decoder: str, train_tf: Any, val_tf: Any,
                digest: str | None = None) -> tuple[ShardedImageFolder, ShardedImageFolder]:
    """The pack's training and validation sets, after the quick check (data/shards.py `verify`: sizes, the
    index); `digest`: the pack the run started with (run.json `dataset.packed.digest`), which this one
    must be. ShardError when it cannot be used."""
    manifest = shards.verify(root)
    if digest and manifest["digest"] != digest:
        raise shards.ShardError(f"the pack at {root} has digest {manifest['digest'][:16]}..., but the run started "
                                f"with {digest[:16]}... (run.json dataset.packed): stage the run's data again")
    loader = bytes_loader(decoder)
    return (ShardedImageFolder(root, "train", train_tf, loader, manifest),
            ShardedImageFolder(root, "val", val_tf, loader, manifest))
