"""Fixtures of the training tests: tiny trial directories on the generated `smoke` dataset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.spec.seeds import small_resnet

from tests.helpers import REPO

# Small enough that an epoch takes about a second on one CPU core.
TINY_DATASET = {"name": "smoke", "train_images": 192, "val_images": 101, "classes": 10, "image_size": 16, "seed": 0}


def write_trial_dir(path: Path, *, graph: Any = None, hparams: dict[str, Any] | None = None,
                    **trial: Any) -> Path:
    """A trial directory as the controller prepares it (docs/internals.md, "Trial program")."""
    path.mkdir(parents=True, exist_ok=True)
    dataset = {**TINY_DATASET, **trial.pop("dataset", {})}
    size = dataset["image_size"]
    graph = graph if graph is not None else small_resnet(dataset["classes"], size, width=8)
    config = {"trial": path.name, "epoch_budget": 2, "precision": "fp32", "preset": dataset["name"], "data": None,
              "dataset": dataset, "seed": 3, "device_type": "cpu", "early_stopping_patience": 2,
              "num_classes": dataset["classes"], "image_size": size, **trial}
    hp = {"batch_size": 32, "lr": 0.05, "weight_decay": 5e-4, "label_smoothing": 0.1, "dropout": 0.1,
          "kernel_size": 3, **(hparams or {})}
    (path / "graph.json").write_text(json.dumps(graph.to_json() if hasattr(graph, "to_json") else graph))
    (path / "hparams.json").write_text(json.dumps(hp))
    (path / "trial.json").write_text(json.dumps(config))
    return path


def run_trial_program(trial_dir: Path, *args: str, code: str | None = None, timeout: float = 600,
                      env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m aiperf_runner.train.trial TRIAL_DIR ARGS...` (or `python -c code`) in a clean environment."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
             and not k.startswith("SLURM_")}
    clean["PYTHONPATH"] = os.pathsep.join([str(REPO), clean.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    clean.setdefault("OMP_NUM_THREADS", "1")  # per process; steadier on a shared machine
    clean.update(env or {})
    argv = [sys.executable, "-c", code, str(trial_dir), *args] if code else \
        [sys.executable, "-m", "aiperf_runner.train.trial", str(trial_dir), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=clean, cwd=str(REPO))


@pytest.fixture
def trial_dir(tmp_path: Path) -> Path:
    return write_trial_dir(tmp_path / "t0001")


@pytest.fixture(autouse=True)
def _one_torch_thread(monkeypatch: pytest.MonkeyPatch):
    """In-process training on one thread: steadier on a shared machine; restored afterwards."""
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # run_trial leaves the thread count alone then
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
