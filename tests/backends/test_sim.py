"""The `sim` backend's model: epoch times from the graph's FLOPs over the slot's speed, stragglers,
failures with a retry that continues, and real controller runs on it whose logs verify, one with
the search in a process of its own (about 15 s in all, most of it the two 3-second runs)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from aiperf_runner.backends.base import Backend, LaunchSpec, load_backend
from aiperf_runner.data.presets import get_preset
from aiperf_runner.run.controller import Controller
from aiperf_runner.rundir.config import TRIAL_MODULE, RunConfig
from aiperf_runner.spec.eventlog import iter_events
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.seeds import seed_for_preset
from aiperf_runner.spec.verify import verify

DATASET = get_preset("smoke").dataset(None)
GRAPH = seed_for_preset("smoke", DATASET["classes"], DATASET["image_size"])
COUNTS = flops_per_image(GRAPH)
WORK = COUNTS.train * DATASET["train_images"] + COUNTS.eval * DATASET["val_images"]
EPOCH_S = 0.05


def _backend(tmp_path: Path, **options: object) -> Backend:
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    return load_backend("sim")(run_dir, slots=2, flops_per_s=WORK / EPOCH_S, noise=0, **options)


def _launch(backend: Backend, trial: str, attempt: int = 1, budget: int = 3) -> tuple[LaunchSpec, int]:
    trial_dir = backend.run_dir / "trials" / trial
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "graph.json").write_text(GRAPH.dumps())
    (trial_dir / "trial.json").write_text(json.dumps({"trial": trial, "epoch_budget": budget, "rules": "v2",
                                                      "dataset": DATASET}))
    spec = LaunchSpec(trial_id=trial, attempt=attempt,
                      argv=(sys.executable, "-m", TRIAL_MODULE, str(trial_dir), "--attempt", str(attempt)),
                      trial_dir=trial_dir, stdout=trial_dir / "stdout.log", stderr=trial_dir / "stderr.log")
    handle = backend.launch(spec, backend.slots()[0])
    deadline = time.monotonic() + 30
    while (rc := handle.poll()) is None:
        assert time.monotonic() < deadline, "the simulated attempt never ended"
        time.sleep(0.01)
    return spec, rc


def _events(spec: LaunchSpec) -> list[dict[str, object]]:
    return [e.data for e in iter_events(spec.trial_dir / "events.jsonl")]


def test_epochs_take_the_graphs_flops_over_the_slots_speed(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    spec, rc = _launch(backend, "t0000")
    backend.shutdown()
    assert rc == 0
    events = _events(spec)
    assert [e["type"] for e in events] == ["epoch_end"] * 3 + ["trial_result"]
    for e in events[:3]:
        assert e["seconds"] == pytest.approx(EPOCH_S, abs=1e-5)
        assert e["images_trained"] == DATASET["train_images"] and e["images_evaluated"] == DATASET["val_images"]
        assert 0 < e["val_accuracy"] < 1
    assert events[2]["ended_at"] <= events[3]["t"]
    assert events[3]["epochs"] == 3 and events[3]["best_accuracy"] == max(e["val_accuracy"] for e in events[:3])


def test_stragglers_take_longer(tmp_path: Path) -> None:
    backend = _backend(tmp_path, straggler_rate=1, straggler_factor=2)
    spec, rc = _launch(backend, "t0000", budget=1)
    backend.shutdown()
    assert rc == 0 and _events(spec)[0]["seconds"] == pytest.approx(2 * EPOCH_S, abs=1e-5)


def test_a_failed_attempt_logs_its_error_and_the_retry_continues(tmp_path: Path) -> None:
    backend = _backend(tmp_path, failure_rate=1)
    spec, rc = _launch(backend, "t0000", budget=3)
    assert rc == 1
    failed = _events(spec)
    assert failed[-1]["type"] == "trial_error" and failed[-1]["error"] == "simulated failure"
    done_epochs = [e["epoch"] for e in failed if e["type"] == "epoch_end"]
    retry_backend = _backend(tmp_path)  # no failures: the retry runs what is left
    spec, rc = _launch(retry_backend, "t0000", attempt=2, budget=3)
    backend.shutdown()
    retry_backend.shutdown()
    assert rc == 0
    retried = [e["epoch"] for e in _events(spec)[len(failed):] if e["type"] == "epoch_end"]
    assert retried == list(range(len(done_epochs) + 1, 4))


def test_a_bad_option_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="failure_rate"):
        load_backend("sim")(tmp_path, slots=1, failure_rate=2)


def test_a_controller_run_on_the_sim_backend_verifies(tmp_path: Path) -> None:
    config = RunConfig(preset="smoke", slots=4, duration_s=3.0, backend="sim", epoch_budgets=[2, 2, 2, 2],
                       backend_options={"flops_per_s": WORK / 0.2, "failure_rate": 0.2, "straggler_rate": 0.2})
    controller = Controller.create(config, tmp_path / "run")
    assert controller.run() == "duration"
    report = verify(tmp_path / "run", workers=1)
    assert report["integrity_ok"], [c for c in report["checks"] if not c["ok"]]
    kinds = [e.data["type"] for e in iter_events(tmp_path / "run" / "events.jsonl")]
    assert kinds.count("trial_finished") >= 4 and kinds.count("epoch_end") >= 8


def test_a_controller_of_many_slots_runs_the_search_in_its_own_process(tmp_path: Path) -> None:
    from aiperf_runner.search.buffer import SEARCH_PROCESS_MIN_SLOTS

    config = RunConfig(preset="smoke", slots=SEARCH_PROCESS_MIN_SLOTS, duration_s=3.0, backend="sim",
                       epoch_budgets=[1, 1, 1, 1], backend_options={"flops_per_s": WORK / 0.5})
    controller = Controller.create(config, tmp_path / "run")
    assert controller.buffer._host is not None
    process = controller.buffer._host._process
    assert controller.run() == "duration"
    assert process.returncode == 0  # ended with the run
    report = verify(tmp_path / "run", workers=1)
    assert report["integrity_ok"], [c for c in report["checks"] if not c["ok"]]
    kinds = [e.data["type"] for e in iter_events(tmp_path / "run" / "events.jsonl")]
    assert kinds.count("trial_started") >= SEARCH_PROCESS_MIN_SLOTS and kinds.count("trial_finished") >= 64
