"""Datasets of a trial: `smoke` (generated), `fashion-mnist` (IDX files), `cifar` and `imagenet`
(ImageFolder directories).

Every loader yields `(images, labels)`: images as **uint8** `(N, C, H, W)` tensors (C = 3, or 1 for
fashion-mnist) and labels as int64. Conversion to float and normalisation happen on the training
device (`Normalizer`), which keeps host-to-device copies 4x smaller and the data-loading workers light.

In-memory datasets (`smoke`, `fashion-mnist`) are batched by `TensorLoader` with one `index_select`
per batch; fashion-mnist's training batches are augmented there, whole batches at once
(`CropFlip`: random crop with zero padding, horizontal flip). Its arrays are memory-mapped from the
decoded cache of `aiperf_runner.data.idx`, so the processes of a trial share one copy.

Sharding across the processes of a data-parallel trial:

- training: `DistributedSampler` (shuffled per epoch with `set_epoch`, padded so that every rank
  runs the same number of steps, as DDP requires); the images a rank trains are counted exactly,
  so the epoch's `images_trained` is the sum over ranks of what was really trained.
- validation: `ExactShardSampler` splits the indices without padding or duplicates (rank r gets
  r, r+W, r+2W, ...), so summing the per-rank counts gives exactly the validation set's size.

ImageFolder training images are augmented in the loader's worker processes, each from its own seed
(`SeededImages`, spec/proof.py `sample_seed`: the trial's seed, the epoch and the image), so that the
audit's replay of a segment, loading the same images in its own process, crops and flips them alike.
They are decoded and augmented by the trial's decoder (trial.json `data_decoder`): `pil`, torchvision's
reference path (`folder_transforms`), `tensor`, decode.py's (torchvision.io, uint8 tensors), or `device`,
devdecode.py's (the workers draw the crops; the batch's JPEGs are decoded and cropped on the training device).

With `run --stage-data` (data/staging.py) the data root is the node's staged copy, and ImageFolder
datasets take their classes and samples from the run's index (indexed_folder.py) instead of
scanning the tree in every process. A data root that holds a pack (data/shards.py, `aiperf-runner
stage`) is read through sharded_folder.py: the same images in the same order, so the same batches.

`smoke` is generated from a seed with numpy using only +, -, *, /, floor, abs and sqrt (no
transcendental functions, no Gaussian sampling), so it is bit-identical on every rank, node and
platform; it is generated once per process and kept as a uint8 tensor.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, Sampler

from aiperf_runner.data import idx as idxdata
from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.proof import sample_seed

DATASETS = ("smoke", "fashion-mnist", "cifar", "imagenet")

# Per-channel mean and std of each dataset on the [0, 1] scale (fashion-mnist: its 60,000 training
# images, `idxdata.mean_std`).
MEAN_STD: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "smoke": ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
    "fashion-mnist": ((0.2860,), (0.3530,)),
    "cifar": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}

SMOKE_DEFAULTS = {"train_images": 4000, "val_images": 2000, "classes": 10, "image_size": 32}


class DataError(AiperfError, ValueError):
    """A dataset that cannot be used (missing directory, wrong class count, ...)."""


# ---- the generated `smoke` dataset ---------------------------------------------------------------

SMOKE_LABEL_NOISE = 0.03
SMOKE_PATTERNS = ("disk", "ring", "square", "frame", "cross", "hstripes", "vstripes",
                  "dstripes", "checker", "triangle")


def _smoke_masks(kind: str, rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """Soft masks in [0, 1] of shape (n, size, size) for one pattern, randomly placed and sized."""
    coord = (np.arange(size, dtype=np.float64) + 0.5) / size  # pixel centres in (0, 1)
    y = coord[None, :, None]
    x = coord[None, None, :]
    px = 1.0 / size  # one pixel, for anti-aliased edges

    def col(a: np.ndarray) -> np.ndarray:
        return a[:, None, None]

    def edge(d: np.ndarray) -> np.ndarray:
        """Signed distance (negative inside) -> soft inside mask."""
        return np.clip(0.5 - d / px, 0.0, 1.0)

    cx = col(rng.uniform(0.35, 0.65, n))
    cy = col(rng.uniform(0.35, 0.65, n))
    r = col(rng.uniform(0.22, 0.33, n))
    dx, dy = x - cx, y - cy
    if kind == "disk":
        return edge(np.sqrt(dx * dx + dy * dy) - r)
    if kind == "ring":
        width = r * 0.35
        return edge(np.abs(np.sqrt(dx * dx + dy * dy) - r * 0.8) - width / 2)
    if kind == "square":
        return edge(np.maximum(np.abs(dx), np.abs(dy)) - r * 0.85)
    if kind == "frame":
        return edge(np.abs(np.maximum(np.abs(dx), np.abs(dy)) - r * 0.75) - r * 0.15)
    if kind == "cross":
        arm = r * 0.28
        horizontal = np.maximum(np.abs(dy) - arm, np.abs(dx) - r)
        vertical = np.maximum(np.abs(dx) - arm, np.abs(dy) - r)
        return edge(np.minimum(horizontal, vertical))
    if kind == "triangle":
        # Upright isosceles triangle: apex above the centre, base below it.
        h = r * 1.9
        top = cy - h / 2
        t = (y - top) / h  # 0 at the apex, 1 at the base
        half = t * r * 1.1
        inside = np.maximum(np.maximum(-t, t - 1.0) * h, np.abs(dx) - half)
        return edge(inside)
    # Textures over the whole image: period 4-8 px, random phase.
    period = col(rng.uniform(4.0, 8.0, n)) / size
    phase = col(rng.uniform(0.0, 1.0, n))

    def wave(u: np.ndarray) -> np.ndarray:
        """Square wave with soft edges: 1 on the first half of each period."""
        f = u / period + phase
        frac = f - np.floor(f)
        d = (np.abs(frac - 0.25) - 0.25) * period  # distance to the band (negative inside)
        return edge(d)

    if kind == "hstripes":
        return wave(y + 0 * x)
    if kind == "vstripes":
        return wave(x + 0 * y)
    if kind == "dstripes":
        sign = col(np.where(rng.uniform(0.0, 1.0, n) < 0.5, -1.0, 1.0))
        return wave((x + sign * y) / math.sqrt(2.0))
    if kind == "checker":
        a = wave(x + 0 * y)
        b = wave(y + 0 * x)
        return a * (1 - b) + b * (1 - a)
    raise ValueError(f"unknown smoke pattern {kind!r}")


def generate_smoke(n: int, *, num_classes: int = 10, image_size: int = 32, seed: int = 0,
                   split: str = "train", label_noise: float = SMOKE_LABEL_NOISE) -> tuple[np.ndarray, np.ndarray]:
    """`n` images (uint8, (n, 3, H, W)) and labels (int64) of the smoke dataset.

    Class c is pattern SMOKE_PATTERNS[c] drawn with random position, size, colours and phase,
    plus per-pixel noise. Classes are balanced. A fraction `label_noise` of the images carry
    another class's label, so no model reaches 100 % (a regulated score needs accuracy < 1).
    Same arguments, same bytes, everywhere.
    """
    if not 2 <= num_classes <= len(SMOKE_PATTERNS):
        raise DataError(f"smoke dataset has 2 to {len(SMOKE_PATTERNS)} classes, not {num_classes}")
    if image_size < 8:
        raise DataError(f"smoke images must be at least 8 pixels wide, not {image_size}")
    split_id = {"train": 0, "val": 1, "private": 2}[split]
    rng = np.random.Generator(np.random.PCG64([int(seed), split_id, num_classes, image_size]))
    labels = (np.arange(n) % num_classes).astype(np.int64)
    labels = labels[rng.permutation(n)]
    images = np.empty((n, 3, image_size, image_size), dtype=np.uint8)
    chunk = max(1, (1 << 22) // (image_size * image_size))  # bounded memory for large images
    for start in range(0, n, chunk):
        lab = labels[start:start + chunk]
        m = len(lab)
        masks = np.empty((m, image_size, image_size))
        for c in range(num_classes):
            idx = np.flatnonzero(lab == c)
            if len(idx):
                masks[idx] = _smoke_masks(SMOKE_PATTERNS[c], rng, len(idx), image_size)
        # Foreground and background colours with a guaranteed brightness gap, random polarity.
        dark = rng.uniform(0.0, 0.4, (m, 3))
        light = rng.uniform(0.6, 1.0, (m, 3))
        swap = rng.uniform(0.0, 1.0, (m, 1)) < 0.5
        fg = np.where(swap, dark, light).astype(np.float32)[:, :, None, None]
        bg = np.where(swap, light, dark).astype(np.float32)[:, :, None, None]
        img = bg + (fg - bg) * masks.astype(np.float32)[:, None]
        # Noise: sum of two uniforms (triangular, std ~0.12), independent per channel.
        shape = img.shape
        img += (rng.random(shape, dtype=np.float32) + rng.random(shape, dtype=np.float32) - np.float32(1.0)) \
            * np.float32(0.3)
        np.clip(img, 0.0, 1.0, out=img)
        img *= np.float32(255.0)
        img += np.float32(0.5)
        images[start:start + m] = np.floor(img).astype(np.uint8)
    # Label noise, drawn after the images: relabel a fixed fraction to a different class.
    flip = rng.permutation(n)[:int(round(label_noise * n))]
    labels = labels.copy()
    labels[flip] = (labels[flip] + rng.integers(1, num_classes, len(flip))) % num_classes
    return images, labels


@functools.lru_cache(maxsize=4)
def smoke_tensors(n: int, num_classes: int, image_size: int, seed: int,
                  split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The smoke split as (uint8 images, int64 labels) tensors, generated once per process."""
    images, labels = generate_smoke(n, num_classes=num_classes, image_size=image_size, seed=seed, split=split)
    return torch.from_numpy(images), torch.from_numpy(labels)


def smoke_digest(images: torch.Tensor, labels: torch.Tensor) -> str:
    """SHA-256 of a split's bytes: equal on every rank and node for the same configuration."""
    h = hashlib.sha256()
    h.update(images.numpy().tobytes())
    h.update(labels.numpy().tobytes())
    return h.hexdigest()


# ---- fashion-mnist --------------------------------------------------------------------------------

FASHION_MNIST_PADDING = 3  # random-crop padding: 28 // 8, as cifar's 4 pixels at 32


def fashion_mnist_tensors(spec: DataSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train images, train labels, val images, val labels): images uint8 (N, 1, 28, 28) sharing the
    memory map of the decoded cache (no copy), labels int64."""
    try:
        data = idxdata.load(spec.root)
    except idxdata.IdxError as exc:
        raise DataError(str(exc)) from None
    if spec.sha256 and data.sha256 != spec.sha256:
        raise DataError(f"fashion-mnist: the files under {idxdata.data_dir(spec.root)} decode to data with SHA-256 "
                        f"{data.sha256[:16]}..., but the run started with {spec.sha256[:16]}... (run.json "
                        "dataset.sha256): the data changed during the run")
    if spec.num_classes != idxdata.CLASSES or spec.image_size != idxdata.IMAGE_SHAPE[0] or spec.channels != 1:
        raise DataError(f"fashion-mnist has 1x28x28 images in {idxdata.CLASSES} classes; the trial expects "
                        f"{spec.channels}x{spec.image_size}x{spec.image_size} in {spec.num_classes}")

    def tensors(split: idxdata.Split) -> tuple[torch.Tensor, torch.Tensor]:
        with warnings.catch_warnings():  # a read-only source map would warn; ours is copy-on-write
            warnings.simplefilter("ignore", UserWarning)
            images = torch.from_numpy(split.images).unsqueeze(1)
        return images, torch.from_numpy(np.asarray(split.labels, dtype=np.int64))

    return (*tensors(data.train), *tensors(data.val))


# ---- samplers and loaders -------------------------------------------------------------------------

class ExactShardSampler(Sampler[int]):
    """Rank r of W gets indices r, r+W, r+2W, ... of range(n): no padding, no duplicates."""

    def __init__(self, n: int, rank: int = 0, world_size: int = 1) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world of {world_size}")
        self.n, self.rank, self.world_size = n, rank, world_size

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.n, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.world_size))


class CropFlip:
    """Random crop with zero padding and random horizontal flip of a uint8 batch (N, C, H, W).

    The torchvision recipe (`RandomCrop(size, padding)`, `RandomHorizontalFlip()`) done for a whole
    batch in one gather on the batch's device, with torch's global (host) generator, which the trial
    seeds per rank at the start of every segment (spec/proof.py)."""

    def __init__(self, padding: int) -> None:
        self.padding = int(padding)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        n, c, h, w = images.shape
        p = self.padding
        device = images.device
        padded = F.pad(images, (p, p, p, p)) if p else images
        # Drawn on the host whatever the device: the same numbers from the same seed on a GPU and on the
        # CPU that re-executes a segment (spec/proof.py); a few bytes copied per batch.
        dy = torch.randint(0, 2 * p + 1, (n, 1)).to(device, non_blocking=True)
        dx = torch.randint(0, 2 * p + 1, (n, 1)).to(device, non_blocking=True)
        flip = (torch.rand(n, 1) < 0.5).to(device, non_blocking=True)
        cols = torch.arange(w, device=device)
        rows = dy + torch.arange(h, device=device)  # (n, h)
        cols = dx + torch.where(flip, w - 1 - cols, cols)  # (n, w)
        batch = torch.arange(n, device=device).view(n, 1, 1, 1)
        channel = torch.arange(c, device=device).view(1, c, 1, 1)
        return padded[batch, channel, rows.view(n, 1, h, 1), cols.view(n, 1, 1, w)]


class TensorLoader:
    """Batches of an in-memory (uint8 images, labels) pair in the order of a sampler.

    One `index_select` per batch (no per-sample collation), then `augment` when given. With a CUDA
    `device` the tensors are moved there once, so batches never cross the bus.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int,
                 sampler: Sampler[int] | Sequence[int], device: torch.device | None = None,
                 drop_singleton: bool = False, augment: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        if device is not None and device.type != "cpu":
            images, labels = images.to(device), labels.to(device)
        self.images, self.labels = images, labels
        self.batch_size = int(batch_size)
        self.sampler = sampler
        self.drop_singleton = drop_singleton
        self.augment = augment

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        n = len(cast(Sized, self.sampler))  # the samplers used here all have a length
        batches = -(-n // self.batch_size)
        if self.drop_singleton and n % self.batch_size == 1 and n > 1:
            batches -= 1
        return batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        index = torch.as_tensor(list(self.sampler), dtype=torch.long, device=self.images.device)
        for i in range(len(self)):
            b = index[i * self.batch_size:(i + 1) * self.batch_size]
            images = self.images.index_select(0, b)
            yield (self.augment(images) if self.augment is not None else images), self.labels.index_select(0, b)


class EpochIndices(Sampler[int]):
    """A sampler's indices, each carrying its epoch (`epoch * n + index`): the data-loader workers, which
    live across epochs, see the epoch with every image (`SeededImages`)."""

    def __init__(self, sampler: DistributedSampler[Any], n: int) -> None:
        self.sampler, self.n, self.epoch = sampler, n, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        offset = self.epoch * self.n
        return (offset + i for i in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)


class SeededImages(torch.utils.data.Dataset):
    """A training ImageFolder whose every image is augmented from its own seed (spec/proof.py
    `sample_seed`): the same crop and flip in any worker, on any rank, and in the audit's replay."""

    def __init__(self, base: Any, trial_seed: int) -> None:
        self.base, self.trial_seed, self.n = base, trial_seed, len(base)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, item: int) -> Any:
        epoch, index = divmod(int(item), self.n)
        with torch.random.fork_rng(devices=[]):  # the caller's generator is left as it was
            # The CPU generator alone (the transforms draw from it): torch.manual_seed would also reseed the
            # GPU's generator on every image, which costs 0.1 ms an image and, in a process without loader
            # workers (the audit's replay), would reset the dropout the training step draws on the GPU.
            torch.default_generator.manual_seed(sample_seed(self.trial_seed, epoch, index))
            return self.base[index]


class FolderLoader:
    """A DataLoader over an ImageFolder plus `set_epoch`, dropping a final batch of one image.

    (BatchNorm cannot normalise a batch of one image whose feature maps are 1x1.) `finish`: what makes the
    batch's images of what the workers handed over (the `device` decoder's, devdecode.py `DeviceFinish`).
    """

    def __init__(self, loader: DataLoader, drop_singleton: bool = False,
                 finish: Callable[[Any], torch.Tensor] | None = None) -> None:
        self.loader = loader
        self.drop_singleton = drop_singleton
        self.finish = finish
        n = len(loader.sampler)  # type: ignore[arg-type]
        self._singleton = drop_singleton and n > 1 and n % loader.batch_size == 1  # type: ignore[operator]

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.loader.sampler, "set_epoch"):
            self.loader.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.loader) - int(self._singleton)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        last = len(self)
        for i, (images, labels) in enumerate(self.loader):
            if i == last:
                break
            yield (self.finish(images) if self.finish is not None else images), labels


class Normalizer:
    """uint8 (N, C, H, W) on any device -> normalised float32 on `device`."""

    def __init__(self, dataset: str, device: torch.device, channels_last: bool = False) -> None:
        mean, std = MEAN_STD[dataset]
        self.device = device
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1) * 255.0
        self.inv_std = 1.0 / (torch.tensor(std, device=device).view(1, -1, 1, 1) * 255.0)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.non_blocking = device.type == "cuda"

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        x = images.to(self.device, non_blocking=self.non_blocking)
        x = x.to(dtype=torch.float32, memory_format=self.memory_format)
        return x.sub_(self.mean).mul_(self.inv_std)


# ---- configuration from trial.json -------------------------------------------------------------------

@dataclass(frozen=True)
class DataSpec:
    """What a trial trains on."""

    name: str  # one of DATASETS
    num_classes: int
    image_size: int
    root: str | None = None  # ImageFolder root with train/ and val/ (cifar, imagenet); IDX files (fashion-mnist)
    train_images: int | None = None  # smoke sizes
    val_images: int | None = None
    seed: int = 0  # smoke generation seed (the run's dataset, not the trial's seed)
    # smoke, in the service's audit only: validate on the split "private" generated from this seed (the
    # service's secret), images of the same distribution that no runner has read.
    private_seed: int | None = None
    channels: int = 3
    sha256: str | None = None  # fashion-mnist: the decoded data the run started with (run.json dataset.sha256)
    index: str | None = None  # ImageFolder: the run's data index (data/staging.py), read instead of scanning the tree
    decoder: str | None = None  # ImageFolder: one of DATA_DECODERS (rundir/config.py); None: $AIPERF_DATA_DECODER, else `tensor`
    packed: str | None = None  # a pack's digest (run.json dataset.packed.digest): the pack the run started with

    @classmethod
    def audited(cls, trial: Mapping[str, Any], dataset: Mapping[str, Any], data: str | None) -> DataSpec:
        """What the service's audit re-executes or re-evaluates a site's trial on: `dataset` (the preset's
        block, as the service holds it) at `data`, with its image size and classes, never the sizes the
        site's trial.json states."""
        own = ("image_size", "num_classes")
        return cls.from_trial({**{k: v for k, v in trial.items() if k not in own}, "dataset": dict(dataset),
                               "data": data})

    @classmethod
    def from_trial(cls, trial: dict[str, Any]) -> DataSpec:
        """From trial.json: `dataset` (as in run.json), `preset`, `data`, `num_classes`, `image_size`."""
        ds = dict(trial.get("dataset") or {})
        name = ds.get("name") or trial.get("preset") or "smoke"
        if name not in DATASETS:
            raise DataError(f"unknown dataset {name!r} (expected one of {', '.join(DATASETS)})")
        num_classes = int(trial.get("num_classes") or ds.get("classes") or SMOKE_DEFAULTS["classes"])
        image_size = int(trial.get("image_size") or ds.get("image_size") or SMOKE_DEFAULTS["image_size"])
        if name == "smoke":
            return cls(name, num_classes, image_size,
                       train_images=int(ds.get("train_images") or SMOKE_DEFAULTS["train_images"]),
                       val_images=int(ds.get("val_images") or SMOKE_DEFAULTS["val_images"]),
                       seed=int(ds.get("seed", 0)))
        if name == "fashion-mnist":
            return cls(name, num_classes, image_size, root=trial.get("data") or ds.get("root"),
                       channels=int(ds.get("channels") or 1), sha256=ds.get("sha256"))
        root = trial.get("data") or ds.get("root")
        if not root:
            raise DataError(f"dataset {name!r} needs a data directory (--data) with train/ and val/ inside")
        packed = ds.get("packed")
        # A trial.json that names no decoder was written before there was a choice: its images went through PIL.
        return cls(name, num_classes, image_size, root=str(root), decoder=str(trial.get("data_decoder") or "pil"),
                   packed=packed.get("digest") if isinstance(packed, dict) else None)


def folder_transforms(name: str, image_size: int) -> tuple[Any, Any]:
    """Train and validation transforms (PIL -> uint8 tensor) of the torchvision references."""
    from torchvision.transforms import v2 as T

    to_uint8 = [T.PILToTensor()]
    if name == "imagenet":
        resize = int(round(image_size * 256 / 224))
        train = T.Compose([T.RandomResizedCrop(image_size, antialias=True), T.RandomHorizontalFlip(), *to_uint8])
        val = T.Compose([T.Resize(resize, antialias=True), T.CenterCrop(image_size), *to_uint8])
    else:  # cifar
        pad = max(1, image_size // 8)
        train = T.Compose([T.Resize(image_size, antialias=True), T.RandomCrop(image_size, padding=pad),
                           T.RandomHorizontalFlip(), *to_uint8])
        val = T.Compose([T.Resize(image_size, antialias=True), T.CenterCrop(image_size), *to_uint8])
    return train, val


def decoder_of(spec: DataSpec) -> str:
    """The ImageFolder decoder of a trial: its spec's, else $AIPERF_DATA_DECODER, else `tensor`."""
    from .decode import default_decoder

    return spec.decoder or default_decoder()


def folder_decoding(spec: DataSpec) -> tuple[Any, Any, Callable[[str], Any]]:
    """(training transform, validation transform, file loader) of an ImageFolder with the spec's decoder."""
    from torchvision.datasets.folder import default_loader

    from . import decode

    decoder = decoder_of(spec)
    if decoder == "pil":
        return (*folder_transforms(spec.name, spec.image_size), default_loader)
    if decoder == "tensor":
        return (*decode.tensor_transforms(spec.name, spec.image_size), decode.read_rgb)
    if decoder == "device":
        from . import devdecode

        return (*devdecode.plans(spec.name, spec.image_size), devdecode.read_encoded)
    raise DataError(f"unknown image decoder {decoder!r} (expected one of {', '.join(decode.DATA_DECODERS)})")


def default_workers(local_world_size: int = 1) -> int:
    """Data-loading worker processes per rank: $AIPERF_DATA_WORKERS, else the rank's share of CPUs."""
    env = os.environ.get("AIPERF_DATA_WORKERS")
    if env is not None and env != "":
        return max(0, int(env))
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(16, cpus // max(1, local_world_size) - 1))


@dataclass
class TrialData:
    train: TensorLoader | FolderLoader
    val: TensorLoader | FolderLoader
    train_size: int  # images in the whole training set
    val_size: int  # images in the whole validation set
    normalizer: Normalizer


def _in_memory_data(spec: DataSpec, batch_size: int, rank: int, world_size: int, device: torch.device,
                    shuffle_seed: int, normalizer: Normalizer) -> TrialData:
    """smoke (generated) or fashion-mnist (memory-mapped, augmented): batched by TensorLoader."""
    augment: Callable[[torch.Tensor], torch.Tensor] | None = None
    if spec.name == "smoke":
        assert spec.train_images is not None and spec.val_images is not None
        train_x, train_y = smoke_tensors(spec.train_images, spec.num_classes, spec.image_size, spec.seed, "train")
        val_seed, val_split = (spec.seed, "val") if spec.private_seed is None else (spec.private_seed, "private")
        val_x, val_y = smoke_tensors(spec.val_images, spec.num_classes, spec.image_size, val_seed, val_split)
    else:
        train_x, train_y, val_x, val_y = fashion_mnist_tensors(spec)
        augment = CropFlip(FASHION_MNIST_PADDING)
    indices = cast(Any, range(len(train_y)))  # DistributedSampler only needs len() of its "dataset"
    train_sampler: DistributedSampler[int] = DistributedSampler(indices, num_replicas=world_size, rank=rank,
                                                                shuffle=True, seed=shuffle_seed)
    train = TensorLoader(train_x, train_y, batch_size, train_sampler, device, drop_singleton=True, augment=augment)
    val = TensorLoader(val_x, val_y, batch_size, ExactShardSampler(len(val_y), rank, world_size), device)
    return TrialData(train, val, len(train_y), len(val_y), normalizer)


def _folder_sets(spec: DataSpec, root: Path) -> tuple[Any, Any]:
    """An ImageFolder's training and validation datasets: from a pack (data/shards.py) when `root` holds one,
    else from the run's index (--stage-data), else from a scan of the tree."""
    from aiperf_runner.data import shards

    train_tf, val_tf, loader = folder_decoding(spec)
    if shards.is_pack(root):
        from .sharded_folder import packed_sets

        try:
            return packed_sets(root, decoder_of(spec), train_tf, val_tf, spec.packed)
        except shards.ShardError as exc:
            raise DataError(f"{spec.name}: {exc}") from None
    for split in ("train", "val"):
        if not (root / split).is_dir():
            raise DataError(f"{spec.name}: no {split}/ directory under {root} (ImageFolder layout expected: "
                            f"{root}/{split}/<class>/<image>, or a pack: aiperf-runner stage)")
    from torchvision.datasets import ImageFolder

    from .indexed_folder import IndexedImageFolder

    if spec.index:
        folders = json.loads(Path(spec.index).read_text())["folders"]
        return (IndexedImageFolder(str(root / "train"), folders["train"], transform=train_tf, loader=loader),
                IndexedImageFolder(str(root / "val"), folders["val"], transform=val_tf, loader=loader))
    return (ImageFolder(str(root / "train"), transform=train_tf, loader=loader),
            ImageFolder(str(root / "val"), transform=val_tf, loader=loader))


def build_data(spec: DataSpec, *, batch_size: int, rank: int = 0, world_size: int = 1,
               device: torch.device | None = None, shuffle_seed: int = 0, local_world_size: int = 1,
               workers: int | None = None, channels_last: bool = False,
               worker_init_fn: Callable[[int], None] | None = None) -> TrialData:
    """Loaders of this rank's shard: shuffled training, exact-shard validation (an ImageFolder's
    worker processes start with `worker_init_fn`: the trial pins them to the rank's CPUs)."""
    device = device or torch.device("cpu")
    normalizer = Normalizer(spec.name, device, channels_last)
    if spec.name in ("smoke", "fashion-mnist"):
        return _in_memory_data(spec, batch_size, rank, world_size, device, shuffle_seed, normalizer)

    root = Path(spec.root or "")
    train_set, val_set = _folder_sets(spec, root)
    if len(train_set.classes) != spec.num_classes:
        raise DataError(f"{root}/train has {len(train_set.classes)} classes, the trial expects {spec.num_classes}")
    if val_set.classes != train_set.classes:
        raise DataError(f"{root}/val and {root}/train have different class folders")
    workers = default_workers(local_world_size) if workers is None else workers
    on_device = decoder_of(spec) == "device"
    finish: Callable[[Any], torch.Tensor] | None = None
    if on_device:  # the workers hand over bytes and boxes; the images are made on the device
        from . import devdecode

        finish = devdecode.DeviceFinish(device, spec.name, spec.image_size)
    common: dict[str, Any] = {"batch_size": batch_size, "num_workers": workers,
                              "pin_memory": device.type == "cuda" and not on_device,
                              "persistent_workers": workers > 0, "worker_init_fn": worker_init_fn,
                              **({"collate_fn": devdecode.collate} if on_device else {})}
    train_sampler: DistributedSampler[Any] = DistributedSampler(train_set, num_replicas=world_size, rank=rank,
                                                                shuffle=True, seed=shuffle_seed)
    # A generator of its own: the loader's workers' seeds are not drawn from the global one, whose numbers
    # (dropout) a segment's replay must draw alike; the images are seeded one by one anyway.
    train = FolderLoader(DataLoader(SeededImages(train_set, shuffle_seed), sampler=EpochIndices(
        train_sampler, len(train_set)), generator=torch.Generator().manual_seed(shuffle_seed), **common),
        drop_singleton=True, finish=finish)
    val = FolderLoader(DataLoader(val_set, sampler=ExactShardSampler(len(val_set), rank, world_size), **common),
                       finish=finish)
    if on_device and device.type != "cpu":  # on the CPU the images are the `tensor` decoder's, bit for bit
        problem = devdecode.tolerance_problem(devdecode.first_images(val_set), spec.name, spec.image_size, device,
                                              folder_transforms(spec.name, spec.image_size)[1])
        if problem:
            raise DataError(problem)
    return TrialData(train, val, len(train_set), len(val_set), normalizer)
