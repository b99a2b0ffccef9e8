"""The trial program with `run --stage-data`: it loads the node's staged copy (not the data root),
with the ImageFolder samples from the run's index, and refuses a copy that does not match the
manifest with a `trial_error` naming the node (masked like every error text). ~15 s."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from aiperf_runner.data import staging as stagedata
from aiperf_runner.spec.eventlog import iter_events
from aiperf_runner.train.config import TrialConfig
from aiperf_runner.train.data import build_data

from tests.train.conftest import run_trial_program, write_trial_dir
from tests.train.test_data import _png_folder


def _staged_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(run directory, its trial t0000, the data root) of a cifar-like run that stages to nvme/%n."""
    data = _png_folder(tmp_path / "data")
    run_dir = tmp_path / "run"
    trial_dir = write_trial_dir(run_dir / "trials" / "t0000", preset="cifar",
                                dataset={"name": "cifar", "classes": 3, "image_size": 32})
    (run_dir / "local").mkdir()
    (run_dir / "local" / "private.json").write_text(json.dumps({"data": str(data),
                                                                "stage_data": str(tmp_path / "nvme" / "%n")}))
    (run_dir / "run.json").write_text(json.dumps({"run_id": "cd" * 16}))
    stagedata.prepare(run_dir, data, "folder")
    return run_dir, trial_dir, data


def test_the_trial_reads_the_staged_copy_with_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, trial_dir, data = _staged_run(tmp_path)
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    cfg = TrialConfig.load(trial_dir)
    copy = tmp_path / "nvme" / "n1" / f"aiperf-data-{stagedata.read_manifest(run_dir)['digest'][:16]}"
    assert cfg.data.root == str(copy) and cfg.data.index == str(run_dir / "local" / stagedata.INDEX_NAME)
    shutil.rmtree(data)  # from now on only the staged copy exists
    loaded = build_data(TrialConfig.load(trial_dir).data, batch_size=4, workers=0)
    assert (loaded.train_size, loaded.val_size) == (15, 9)
    samples = loaded.train.loader.dataset.base.samples  # type: ignore[union-attr] # (SeededImages around it)
    assert samples[0] == (str(copy / "train" / "class0" / "img0.png"), 0)
    assert sum(len(x) for x, _ in loaded.val) == 9  # the images decode from the copy


def test_the_trial_program_refuses_a_corrupted_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, trial_dir, _data = _staged_run(tmp_path)
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    copy = stagedata.stage_for_trial(run_dir)  # staged, and checked for this run outside SLURM
    assert copy is not None
    (copy / "val" / "class2" / "img1.png").unlink()
    proc = run_trial_program(trial_dir, "--attempt", "1", env={"SLURMD_NODENAME": "n2", "SLURM_JOB_ID": "42"},
                             timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    errors = [e.data for e in iter_events(trial_dir / "events.jsonl") if e.data["type"] == "trial_error"]
    assert len(errors) == 1, proc.stderr[-2000:]
    error = errors[0]["error"]
    assert error.startswith("StageError: node n2: the staged copy .../aiperf-data-"), error
    assert "files instead of" in error and "missing: val/class2/img1.png" in error and str(tmp_path) not in error
    assert not any(e.data["type"] == "epoch_end" for e in iter_events(trial_dir / "events.jsonl"))
