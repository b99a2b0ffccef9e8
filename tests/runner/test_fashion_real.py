"""Real images, briefly: `aiperf-runner run --preset fashion-mnist` on Fashion-MNIST with 2 slots.

Bounded by what it needs, not a fixed duration: the run is stopped (SIGTERM) once both slots' trials have
trained a whole epoch and a validation accuracy of 0.80 is reached (the seed's first epoch: 0.80, then 0.86;
0.90 after 5). An epoch with two slots takes 16-19 s on a 2-core Xeon alone, 45 s on a 2-core EPYC alone and
59 s there beside the other test stream, where the 110-second run this test used to make trained one epoch a
trial and failed its wish for two. MAX_S bounds the run. Trials finishing are tested with the smoke preset (test_smoke_real.py); docs/running.md says
what longer runs reach.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.data import idx as idxdata
from aiperf_runner.run.state import RunState
from aiperf_runner.spec.verify import verify

from tests.helpers import REPO, need_service, stop_runs_when
from tests.runner.conftest import SHORT_RUN_CHECKS, cli, failed_checks

pytest.importorskip("torch")

MIN_ACCURACY = 0.80
MAX_S = 400


def learned_enough(events: list[dict[str, Any]]) -> bool:
    """Both slots' trials trained an epoch, and the best accuracy reached MIN_ACCURACY."""
    epochs = [e for e in events if e["type"] == "epoch_end"]
    return len({e["trial"] for e in epochs}) >= 2 and max(e["val_accuracy"] for e in epochs) >= MIN_ACCURACY


@pytest.mark.slow
def test_a_real_fashion_mnist_run_learns_and_verifies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_service(Path(idxdata.DEFAULT_DIR, "train-images-idx3-ubyte.gz").exists(),
                 f"Fashion-MNIST not installed in {idxdata.DEFAULT_DIR} (apt-get install dataset-fashion-mnist)")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "aiperf_runner", "run", "--preset", "fashion-mnist", "--slots", "2",
                             "--duration", f"{MAX_S}s", "--out", str(run_dir), "--progress", "plain"],
                            cwd=REPO, env={**os.environ, "AIPERF_CACHE_DIR": str(tmp_path / "cache")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop_runs_when([(proc, run_dir)], learned_enough, MAX_S + 120)
    stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    assert "run finished (stopped)" in stdout, stdout
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["dataset"] == {"name": "fashion-mnist", "train_images": 60_000, "val_images": 10_000,
                                   "classes": 10, "image_size": 28, "channels": 1,
                                   "sha256": run_json["dataset"]["sha256"]}
    state = RunState.load(run_dir)
    assert len({event["trial"] for event in state.epoch_records()}) >= 2, stdout  # both slots trained
    assert state.best_accuracy() is not None and state.best_accuracy() >= MIN_ACCURACY, stdout
    for event in state.epoch_records():  # every epoch trained the whole training set and evaluated all 10,000
        assert event["images_trained"] == 60_000 and event["images_evaluated"] == 10_000
    report = verify(run_dir)
    assert report["integrity_ok"] is True
    assert report["max_accuracy"] >= MIN_ACCURACY
    assert failed_checks(report) <= SHORT_RUN_CHECKS, [c for c in report["checks"] if not c["passed"]]
    assert cli("verify", str(run_dir)).returncode == 0
    summary = json.loads(cli("report", str(run_dir), "--json").stdout)
    assert summary["slot_utilisation"] > 0.9
