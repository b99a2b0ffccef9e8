"""What each preset's dataset is: input shape, classes, image counts. Plain data, no torch, no numpy.

The runner builds its presets (`presets.py`) and the `dataset` block of run.json from this table,
and a verifier can compare a run's declared `dataset` with it (`dataset_problems`), so that the
input shape, the classes and the dataset sizes a score rests on are fixed by the preset, not chosen
by the run. Presets whose data comes from `--data` (an ImageFolder directory) leave the counts the
folder decides as None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DatasetFacts:
    preset: str
    name: str  # run.json dataset.name
    input_shape: tuple[int, int, int]  # (channels, height, width) of one image as the network sees it
    classes: int | None  # None: as many as the --data folder has
    train_images: int | None  # None: as many as the --data folder has
    val_images: int | None

    @property
    def channels(self) -> int:
        return self.input_shape[0]

    @property
    def image_size(self) -> int:
        return self.input_shape[1]


PRESET_DATASETS: dict[str, DatasetFacts] = {
    # Generated, deterministic (train/data.py generate_smoke).
    "smoke": DatasetFacts("smoke", "smoke", (3, 16, 16), 10, 4_000, 1_000),
    # Fashion-MNIST's IDX files: train = train-*, validation = t10k-* (idxdata.py).
    "fashion-mnist": DatasetFacts("fashion-mnist", "fashion-mnist", (1, 28, 28), 10, 60_000, 10_000),
    # ImageFolder directories given with --data.
    "cifar": DatasetFacts("cifar", "cifar", (3, 32, 32), None, None, None),
    "imagenet": DatasetFacts("imagenet", "imagenet", (3, 224, 224), 1_000, None, None),
}


def dataset_problems(preset: str, dataset: Mapping[str, Any]) -> list[str]:
    """Where run.json's `dataset` block disagrees with the preset's facts (empty: it agrees).

    A block without `channels` (written before the field existed) is read as 3 channels."""
    facts = PRESET_DATASETS.get(preset)
    if facts is None:
        return [f"unknown preset {preset!r}"]
    problems = []
    if dataset.get("name") != facts.name:
        problems.append(f"dataset.name is {dataset.get('name')!r}, preset {preset!r} trains on {facts.name!r}")
    declared = (dataset.get("channels", 3), dataset.get("image_size"), dataset.get("image_size"))
    if declared != facts.input_shape:
        problems.append(f"dataset input shape {list(declared)}, preset {preset!r} has {list(facts.input_shape)}")
    for key in ("classes", "train_images", "val_images"):
        want = getattr(facts, key)
        if want is not None and dataset.get(key) != want:
            problems.append(f"dataset.{key} is {dataset.get(key)!r}, preset {preset!r} has {want}")
    return problems


__all__ = ["PRESET_DATASETS", "DatasetFacts", "dataset_problems"]
