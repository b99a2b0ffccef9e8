"""Benchmark presets: dataset, seed architecture, epoch budgets and default duration.

Epoch budget of a trial: round r = trial sequence number // slots; the official budget is
15/30/45/60 epochs for r = 0/1/2/>=3 (docs/running.md), scaled per preset.

Input shape, classes and image counts of each preset's dataset come from `spec/presetfacts.py` (what
verification binds a run to).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.presetfacts import PRESETS as SPEC_PRESETS

OFFICIAL_BUDGETS = (15, 30, 45, 60)
PACK_MANIFEST = "aiperf-shards.json"  # data/shards.py MANIFEST (not imported: numpy, for the command line's start)
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"})


class PresetError(AiperfError, ValueError):
    """A preset that cannot run as asked (unknown name, missing or malformed --data)."""


@dataclass(frozen=True)
class Preset:
    name: str
    image_size: int
    classes: int
    epoch_budgets: tuple[int, int, int, int]  # rounds 0, 1, 2, >=3
    early_stopping_patience: int
    default_duration_s: float
    needs_data: bool
    smoke_sizes: tuple[int, int] = (0, 0)  # generated train / validation images (smoke only)
    channels: int = 3
    data_format: str = "folder"  # "generated" (smoke), "idx" (fashion-mnist), "folder" (ImageFolder --data)
    # The search's bounds on a proposal's size: the seed's FLOPs and layers times these (why, and the
    # values: spec/presetfacts.py, where the verifier reads them too; `_facts` copies them here).
    max_flops_ratio: float | None = 4.0
    max_layers_ratio: float | None = None

    def dataset(self, data: str | None, manifest: str | None = None) -> dict[str, Any]:
        """The `dataset` block of run.json (and of every trial.json); `manifest`: a pack's manifest file, when
        the pack at `data` is on the compute nodes only (`run --data-manifest`)."""
        if self.data_format == "generated":
            return {"name": self.name, "train_images": self.smoke_sizes[0], "val_images": self.smoke_sizes[1],
                    "classes": self.classes, "image_size": self.image_size, "channels": self.channels, "seed": 0}
        if self.data_format == "idx":
            return self._idx_dataset(data)
        if not data:
            raise PresetError(f"preset {self.name!r} needs --data DIR (an ImageFolder directory with train/ and val/)")
        if manifest or (Path(data) / PACK_MANIFEST).is_file():
            return self._packed_dataset(data, manifest)
        root = Path(data)
        counts = {}
        classes: list[str] | None = None
        for split in ("train", "val"):
            split_dir = root / split
            if not split_dir.is_dir():
                raise PresetError(f"--data {data}: no {split}/ directory (expected {data}/{split}/<class>/<image>)")
            names = sorted(e.name for e in os.scandir(split_dir) if e.is_dir())
            if classes is None:
                classes = names
            elif names != classes:
                raise PresetError(f"--data {data}: val/ and train/ have different class folders")
            counts[split] = sum(_count_images(split_dir / c) for c in names)
        assert classes is not None
        if not classes:
            raise PresetError(f"--data {data}: train/ has no class folders")
        return {"name": self.name, "train_images": counts["train"], "val_images": counts["val"],
                "classes": len(classes), "image_size": self.image_size, "channels": self.channels}

    def _packed_dataset(self, data: str, manifest_file: str | None = None) -> dict[str, Any]:
        """A pack (`aiperf-runner stage`, data/shards.py), checked now (sizes, index), before the run's
        clock starts: its counts, and `packed`, the digest that binds the run to its bytes and order (and a
        pixel pack's decoder, `pixels`, which must be the run's).
        `manifest_file`: its manifest copied where this machine reads it (`run --data-manifest`), for a pack on
        the compute nodes' own disks that the controller cannot see; each trial checks its node's pack."""
        from aiperf_runner.data import shards

        try:
            given = shards.read_manifest_file(Path(manifest_file)) if manifest_file else None
            manifest = given if given is not None and not shards.is_pack(data) else shards.verify(data)
        except shards.ShardError as exc:
            raise PresetError(f"--data {data}: {exc}") from None
        if given is not None and given["digest"] != manifest["digest"]:
            raise PresetError(f"--data-manifest {manifest_file} is not the manifest of the pack at {data}")
        counts = {split: int(info["images"]) for split, info in manifest["splits"].items()}
        return {"name": self.name, "train_images": counts["train"], "val_images": counts["val"],
                "classes": len(manifest["classes"]), "image_size": self.image_size, "channels": self.channels,
                "packed": {"digest": manifest["digest"], "images": counts["train"] + counts["val"],
                           **({"pixels": manifest["pixels"]} if manifest.get("pixels") else {})}}

    def _idx_dataset(self, data: str | None) -> dict[str, Any]:
        """Fashion-MNIST: every file checked and decoded now, before the run's clock starts (a bad
        file fails the run here, not every trial), which also fills the cache the trials map."""
        from aiperf_runner.data import idx as idxdata

        try:
            loaded = idxdata.load(data)
        except idxdata.IdxError as exc:
            raise PresetError(str(exc)) from None
        return {"name": self.name, "train_images": len(loaded.train.labels), "val_images": len(loaded.val.labels),
                "classes": self.classes, "image_size": self.image_size, "channels": self.channels,
                "sha256": loaded.sha256}


def _count_images(folder: Path) -> int:
    n = 0
    stack = [folder]
    while stack:
        for entry in os.scandir(stack.pop()):
            if entry.is_dir():
                stack.append(Path(entry.path))
            elif os.path.splitext(entry.name)[1].lower() in IMAGE_SUFFIXES:
                n += 1
    return n


def _facts(name: str) -> dict[str, Any]:
    facts = SPEC_PRESETS[name]
    return {"image_size": facts.image_size, "channels": facts.channels, "classes": facts.classes or 10,
            "max_flops_ratio": facts.max_flops_ratio, "max_layers_ratio": facts.max_layers_ratio}


PRESETS: dict[str, Preset] = {
    # Minutes on a CPU: a generated dataset that the small ResNet learns to > 90 % in 3-4 epochs.
    # 16x16 images keep an epoch of 4,000 images at about 2 CPU-seconds, so that two slots on two
    # cores finish dozens of trials in 5 minutes. Budgets: the official ones / 15. FLOPs bounded at
    # 2x the seed's (3x before 3 December): its epochs take about as long at any size within the
    # bounds, so a 5-minute score follows the sizes the search's path reached; replayed 20 times
    # (bench/search_spread.py) their mean varied by a CV of 7.0 % under 3x and 3.7 % under 2x.
    "smoke": Preset("smoke", epoch_budgets=(1, 2, 3, 4), early_stopping_patience=2, default_duration_s=300,
                    needs_data=False, data_format="generated",
                    smoke_sizes=(SPEC_PRESETS["smoke"].train_images or 0, SPEC_PRESETS["smoke"].val_images or 0),
                    **_facts("smoke")),
    # Real images on a small CPU machine: Fashion-MNIST (60,000 + 10,000 grey 28x28 images, Debian's
    # dataset-fashion-mnist or --data DIR). Budgets: a third of the official ones, as cifar's. The
    # seed ResNet (stride-2 stem, 78 k parameters) trains an epoch in about 14 s on one CPU core and
    # reaches about 0.914 after 12 epochs, 0.918 after 15; wider and deeper children gain a few
    # tenths at equal epochs, so a trial needs 15-20 epochs to pass 0.92. Patience 4: mid-schedule
    # validation loss jumps (learning rate still high) must not stop a trial that is still learning.
    "fashion-mnist": Preset("fashion-mnist", epoch_budgets=(5, 10, 15, 20), early_stopping_patience=4,
                            default_duration_s=1800, needs_data=False, data_format="idx", **_facts("fashion-mnist")),
    # CIFAR-10/100 in ImageFolder layout: a third of the official budgets.
    "cifar": Preset("cifar", epoch_budgets=(5, 10, 15, 20), early_stopping_patience=3, default_duration_s=3600,
                    needs_data=True, **_facts("cifar")),
    # The official workload: ImageNet-1k, ResNet-50 seed, full budgets, at least one hour.
    "imagenet": Preset("imagenet", epoch_budgets=OFFICIAL_BUDGETS, early_stopping_patience=5,
                       default_duration_s=3600, needs_data=True, **_facts("imagenet")),
}


def epoch_budget(budgets: list[int] | tuple[int, ...], round_: int) -> int:
    """The epoch budget of a trial in round `round_` (the last entry holds for every later round)."""
    return int(budgets[min(max(round_, 0), len(budgets) - 1)])


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise PresetError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})") from None
