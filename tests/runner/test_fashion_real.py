"""Real images, briefly: `aiperf-runner run --preset fashion-mnist` on Fashion-MNIST with 2 slots.

Bounded: a 110-second run (plus start and verification). The first round's trials train 5 epochs
each, an epoch in 16-19 s with two slots on this 2-core machine and in about 38 s on CI's, so the
run trains 5-12 epochs in all; it must train both slots' trials, at least 2 epochs of one, and
reach a best validation accuracy of 0.80 (the seed: 0.78 after 1 epoch, 0.87 after 3, 0.90 after
5; trials finishing are tested with the smoke preset, test_smoke_real.py; see docs/running.md for
what longer runs reach).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiperf_runner.data import idx as idxdata
from aiperf_runner.run.state import RunState
from aiperf_runner.spec.verify import verify

from tests.helpers import need_service
from tests.runner.conftest import SHORT_RUN_CHECKS, cli, failed_checks

pytest.importorskip("torch")

MIN_ACCURACY = 0.80


@pytest.mark.slow
def test_a_real_fashion_mnist_run_learns_and_verifies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_service(Path(idxdata.DEFAULT_DIR, "train-images-idx3-ubyte.gz").exists(),
                 f"Fashion-MNIST not installed in {idxdata.DEFAULT_DIR} (apt-get install dataset-fashion-mnist)")
    run_dir = tmp_path / "run"
    out = cli("run", "--preset", "fashion-mnist", "--slots", "2", "--duration", "110s", "--out", str(run_dir),
              "--progress", "plain", env={"AIPERF_CACHE_DIR": str(tmp_path / "cache")}, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "run finished (duration)" in out.stdout
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["dataset"] == {"name": "fashion-mnist", "train_images": 60_000, "val_images": 10_000,
                                   "classes": 10, "image_size": 28, "channels": 1,
                                   "sha256": run_json["dataset"]["sha256"]}
    state = RunState.load(run_dir)
    epochs = [event["trial"] for event in state.epoch_records()]
    assert len(set(epochs)) >= 2 and max(map(epochs.count, epochs)) >= 2, out.stdout  # both slots trained
    assert state.best_accuracy() is not None and state.best_accuracy() >= MIN_ACCURACY, out.stdout
    for event in state.epoch_records():  # every epoch trained the whole training set and evaluated all 10,000
        assert event["images_trained"] == 60_000 and event["images_evaluated"] == 10_000
    report = verify(run_dir)
    assert report["integrity_ok"] is True
    assert report["max_accuracy"] >= MIN_ACCURACY
    assert failed_checks(report) <= SHORT_RUN_CHECKS, [c for c in report["checks"] if not c["passed"]]
    assert cli("verify", str(run_dir)).returncode == 0
    summary = json.loads(cli("report", str(run_dir), "--json").stdout)
    assert summary["slot_utilisation"] > 0.9
