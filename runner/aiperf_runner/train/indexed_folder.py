"""`IndexedImageFolder`: an ImageFolder whose classes and samples come from the run's data index
(data/staging.py) instead of a scan of the tree.

With `run --stage-data` the controller scans the data root once; every trial process then builds
its datasets from that list (same classes, same samples in the same order as ImageFolder's own
scan), which saves each process a walk of the tree (1.3 million files for ImageNet). Its own
module, imported only where ImageFolder data is used, so that data.py needs no torchvision at
import time; at module level so that DataLoader workers can pickle it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torchvision.datasets import ImageFolder


class IndexedImageFolder(ImageFolder):
    """ImageFolder over `root` (one split's directory) with `folder`'s classes and samples: the
    index's `folders[split]`, sample paths relative to `root`."""

    def __init__(self, root: str, folder: dict[str, Any], **kwargs: Any) -> None:
        self._index_classes = [str(c) for c in folder["classes"]]
        self._index_samples = [(str(rel), int(target)) for rel, target in folder["samples"]]
        super().__init__(root, **kwargs)

    def find_classes(self, directory: str | Path) -> tuple[list[str], dict[str, int]]:
        return list(self._index_classes), {c: i for i, c in enumerate(self._index_classes)}

    def make_dataset(self, directory: str | Path, class_to_idx: dict[str, int],
                     extensions: Any = None, is_valid_file: Any = None,
                     allow_empty: bool = False) -> list[tuple[str, int]]:
        used = {self._index_classes[target] for _rel, target in self._index_samples}
        empty = sorted(set(class_to_idx) - used)
        if empty and not allow_empty:  # what ImageFolder's own scan raises
            raise FileNotFoundError(f"Found no valid file for the classes {', '.join(empty)}.")
        return [(os.path.join(str(directory), rel), target) for rel, target in self._index_samples]
