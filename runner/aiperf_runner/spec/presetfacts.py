"""What a preset fixes before a run starts, as verification needs it: input shape, classes, data set
sizes, and the bounds of the hyper-parameters a trial may apply.

The runner builds its presets and its search space from this table (aiperf_runner/data/presets.py,
search/hparams.py), and `integrity.bound` checks every run against it: a log cannot choose a larger
input, fewer classes, a smaller data set or a hyper-parameter outside the space after the fact.
`None` means "as the run's data says" (an ImageFolder of the site's own, e.g. CIFAR-10 or -100).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

KERNEL_SIZE = 3
"""Every trial's `kernel_size` hyper-parameter: fixed, never searched (it only feeds v1-compat's quirk)."""


@dataclass(frozen=True)
class HparamSpace:
    batch_sizes: tuple[int, ...]
    lr: tuple[float, float]
    weight_decay: tuple[float, float]
    label_smoothing: tuple[float, float]
    dropout: tuple[float, float]
    defaults: Mapping[str, Any]

    RANGES = ("lr", "weight_decay", "label_smoothing", "dropout")

    def problems(self, hp: Mapping[str, Any]) -> list[str]:
        """What in `hp` lies outside the space (or is missing, or is not a number)."""
        out = []
        bs = hp.get("batch_size")
        if type(bs) is not int or bs not in self.batch_sizes:
            out.append(f"batch_size {bs!r} not in {list(self.batch_sizes)}")
        for name in self.RANGES:
            value, (lo, hi) = hp.get(name), getattr(self, name)
            if type(value) not in (int, float) or not lo <= value <= hi:
                out.append(f"{name} {value!r} outside [{lo:g}, {hi:g}]")
        ks = hp.get("kernel_size", KERNEL_SIZE)
        if ks != KERNEL_SIZE or type(ks) is not int:
            out.append(f"kernel_size {ks!r}, fixed at {KERNEL_SIZE}")
        return out


@dataclass(frozen=True)
class PresetSpec:
    name: str
    channels: int
    image_size: int
    classes: int | None  # None: the run's data set decides
    train_images: int | None
    val_images: int | None
    space: HparamSpace = field(repr=False, default=None)  # type: ignore[assignment]
    title: str = ""  # the data set's name in messages
    # The search proposes no architecture whose train FLOPs per image exceed this many times the
    # seed's (NNI's morphism tuner bounds model size too). Unbounded, compounding *wider* morphisms grew
    # 5-minute smoke runs' networks to 8-44x the seed, at whatever pace a run's path took: their mean
    # FLOPs per image ranged 1.4e7-2.9e7 between identical runs, and the score with them.
    max_flops_ratio: float | None = 4.0
    # And no architecture with more than this many times the seed's layers. On a small CPU model each
    # layer costs a fixed overhead per batch whatever its FLOPs (a *skip* adds an add and a 1x1 conv),
    # so with FLOPs bounded the epoch time, and the score, still followed how many layers a run's
    # path had grown: 5-minute smoke runs trained networks of 42-49 layers on average (seed 30) at
    # 1.98-2.21 s per epoch of similar FLOPs. NNI's and Auto-Keras' morphism searches bound layers too.
    # Both are checked by the verifier on every trial's graph (spec/bound.py).
    max_layers_ratio: float | None = None

    def __post_init__(self) -> None:
        if not self.title:
            object.__setattr__(self, "title", f"the {self.name} data set")

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (self.channels, self.image_size, self.image_size)


PRESETS: dict[str, PresetSpec] = {p.name: p for p in (
    # Generated images the small ResNet learns in a few CPU epochs (runner: train/data.py).
    PresetSpec("smoke", 3, 16, 10, 4000, 2000, HparamSpace(
        (32, 64, 128), (0.01, 0.3), (1e-5, 1e-3), (0.0, 0.2), (0.0, 0.5),
        {"batch_size": 32, "lr": 0.05, "weight_decay": 5e-4, "label_smoothing": 0.0, "dropout": 0.0}),
        # FLOPs at 2x the seed's (3x before 3 December): see data/presets.py's smoke entry.
        max_flops_ratio=2.0, max_layers_ratio=1.5),
    # Fashion-MNIST's IDX files (Debian's dataset-fashion-mnist): train-* and t10k-*, grey 28x28.
    PresetSpec("fashion-mnist", 1, 28, 10, 60_000, 10_000, HparamSpace(
        (64, 128, 256), (0.01, 0.3), (1e-5, 1e-3), (0.0, 0.2), (0.0, 0.5),
        {"batch_size": 128, "lr": 0.05, "weight_decay": 5e-4, "label_smoothing": 0.0, "dropout": 0.0}), "Fashion-MNIST"),
    # CIFAR-10/100 in ImageFolder layout: sizes and classes are the folder's.
    PresetSpec("cifar", 3, 32, None, None, None, HparamSpace(
        (64, 128, 256), (0.01, 0.4), (1e-5, 1e-3), (0.0, 0.2), (0.0, 0.5),
        {"batch_size": 128, "lr": 0.1, "weight_decay": 5e-4, "label_smoothing": 0.0, "dropout": 0.0})),
    # The official workload: ImageNet-1k (ILSVRC 2012) at 224x224.
    PresetSpec("imagenet", 3, 224, 1000, 1_281_167, 50_000, HparamSpace(
        (64, 128, 256), (0.01, 0.4), (1e-6, 3e-4), (0.0, 0.2), (0.0, 0.5),
        {"batch_size": 128, "lr": 0.1, "weight_decay": 1e-4, "label_smoothing": 0.1, "dropout": 0.0}), "ImageNet-1k"),
)}


def get(name: Any) -> PresetSpec | None:
    return PRESETS.get(name) if isinstance(name, str) else None


def dataset_problems(preset: PresetSpec, dataset: Mapping[str, Any]) -> list[str]:
    """Where run.json's `dataset` block departs from what the preset fixes."""
    out = []
    channels = dataset.get("channels", 3)  # written before the field existed: 3
    if channels != preset.channels:
        out.append(f"dataset.channels is {channels!r}; preset {preset.name!r} fixes {preset.channels}")
    for key, want in (("classes", preset.classes), ("train_images", preset.train_images),
                      ("val_images", preset.val_images), ("image_size", preset.image_size)):
        have = dataset.get(key)
        if want is not None and have != want:
            out.append(f"dataset.{key} is {have!r}; preset {preset.name!r} fixes {want}")
        elif want is None and not (type(have) is int and have >= 1):
            out.append(f"dataset.{key} is {have!r}, expected a positive integer")
    if "packed" in dataset:
        out += _packed_problems(dataset)
    return out


# How far a decoder's validation images may be from the reference decoder's (`pil`), in levels of 255: (mean, largest
# difference) over the images (docs/rules.md, "Decoders"; the `device` decoder's check, train/devdecode.py).
DECODER_TOLERANCE = (0.05, 2)


def pixel_pack_problem(dataset: Mapping[str, Any], decoder: Any) -> str | None:
    """A pack of decoded pixels (`stage --decoded`: `dataset.packed.pixels`) holds one decoder's images; a run
    reading it must decode with that one: what is wrong, or None."""
    packed = dataset.get("packed")
    pixels = packed.get("pixels") if isinstance(packed, Mapping) else None
    if pixels is None or pixels == decoder:
        return None
    return f"dataset.packed.pixels {pixels!r}: a pack of images decoded by {pixels!r} at staging, read by a run " \
           f"whose decoder is {decoder!r}"


def _packed_problems(dataset: Mapping[str, Any]) -> list[str]:
    """A pack's record (data/shards.py): its manifest's digest, and its images, which are the data set's."""
    packed = dataset["packed"]
    if not isinstance(packed, Mapping):
        return [f"dataset.packed is {packed!r}, expected an object (digest, images)"]
    out = []
    digest = packed.get("digest")
    if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
        out.append(f"dataset.packed.digest is {digest!r}, expected 64 lowercase hex characters")
    train, val = dataset.get("train_images"), dataset.get("val_images")
    if type(train) is int and type(val) is int and packed.get("images") != train + val:
        out.append(f"dataset.packed.images is {packed.get('images')!r}; the data set's train_images + "
                   f"val_images are {train + val}")
    return out
