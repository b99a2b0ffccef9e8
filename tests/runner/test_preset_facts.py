"""spec/presetfacts.py: each preset's input shape, classes and sizes, which the runner builds its presets from
and verification binds a run to."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from aiperf_runner.data import idx as idxdata
from aiperf_runner.data.presets import PRESETS, get_preset
from aiperf_runner.spec import presetfacts as spec_presets
from aiperf_runner.spec.seeds import seed_for_preset

from tests.helpers import REPO, need_service


def dataset_problems(preset: str, dataset: dict) -> list[str]:
    spec = spec_presets.get(preset)
    return spec_presets.dataset_problems(spec, dataset) if spec is not None else [f"unknown preset {preset!r}"]


def test_every_preset_has_facts_and_its_seed_takes_that_input() -> None:
    assert set(spec_presets.PRESETS) == set(PRESETS)
    for name, facts in spec_presets.PRESETS.items():
        preset = get_preset(name)
        assert (preset.channels, preset.image_size, preset.image_size) == facts.input_shape
        seed = seed_for_preset(name, preset.classes, preset.image_size)
        assert seed.input_shape == facts.input_shape, name
        assert seed.nodes[seed.output_node] == (preset.classes,)


def test_the_smoke_block_agrees_and_changes_are_named() -> None:
    ds = get_preset("smoke").dataset(None)
    assert dataset_problems("smoke", ds) == []
    assert dataset_problems("smoke", {**ds, "train_images": 40_000}) == [
        "dataset.train_images is 40000; preset 'smoke' fixes 4000"]
    assert dataset_problems("smoke", {**ds, "image_size": 32}) == ["dataset.image_size is 32; preset 'smoke' fixes 16"]
    assert dataset_problems("nope", ds) == ["unknown preset 'nope'"]
    # written before `channels` existed: read as 3 channels; --data decides cifar's counts
    assert dataset_problems("cifar", {"name": "cifar", "image_size": 32, "classes": 7, "train_images": 5,
                                      "val_images": 2}) == []


def test_the_fashion_mnist_block_agrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_service(Path(idxdata.DEFAULT_DIR).is_dir(), "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
    monkeypatch.setenv("AIPERF_CACHE_DIR", str(tmp_path))
    ds = get_preset("fashion-mnist").dataset(None)
    assert dataset_problems("fashion-mnist", ds) == []
    assert dataset_problems("fashion-mnist", {**ds, "channels": 3}) == [
        "dataset.channels is 3; preset 'fashion-mnist' fixes 1"]


def test_table_imports_without_torch_or_numpy_and_presets_without_torch() -> None:
    code = textwrap.dedent("""
        import sys
        class Block:
            def __init__(self, names): self.names = names
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in self.names:
                    raise ImportError(f"blocked: {name}")
        blocker = Block({"torch", "numpy", "django"})
        sys.meta_path.insert(0, blocker)
        import aiperf_runner.spec.presetfacts
        blocker.names = {"torch", "django"}
        import aiperf_runner.data.presets, aiperf_runner.data.idx
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
