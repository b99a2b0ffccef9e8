"""Small pieces of the runner: durations, peak overrides, presets, system facts, run state."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from aiperf_runner.cli.options import parse_duration
from aiperf_runner.data.presets import PresetError, epoch_budget, get_preset
from aiperf_runner.run.state import RunState
from aiperf_runner.util import sysinfo


def test_parse_duration() -> None:
    assert parse_duration("5m") == 300 and parse_duration("90s") == 90 and parse_duration("1.5h") == 5400
    assert parse_duration("300") == 300
    for bad in ("", "5x", "-1m", "0s"):
        with pytest.raises(typer.BadParameter):
            parse_duration(bad)


def test_peak_overrides() -> None:
    assert sysinfo.parse_peak_overrides(["fp32=1.5e12", "BF16=3e12"]) == {"fp32": 1.5e12, "bf16": 3e12}
    for bad in (["fp32"], ["fp32=x"], ["fp32=-1"]):
        with pytest.raises(ValueError):
            sysinfo.parse_peak_overrides(bad)
    system = sysinfo.collect(2, 1, "cpu")
    peaks, sources = sysinfo.declared_peaks(system, {"fp32": 1e12})
    assert peaks["fp32"] == 1e12 and sources["fp32"] == "declared by the operator"
    assert peaks["bf16"] and "CPU estimate" in sources["bf16"]
    with pytest.raises(ValueError, match="unknown precision"):
        sysinfo.declared_peaks(system, {"fp8": 1e12})


def test_system_facts_name_no_host() -> None:
    import socket

    system = sysinfo.collect(2, 1, "cpu", {"nodes": 1})
    assert system["cpu_cores"] >= 1 and system["accelerator_model"] == "cpu" and system["accelerator_count"] == 0
    assert socket.gethostname() not in repr(system)


def test_epoch_budgets_by_round() -> None:
    official = get_preset("imagenet").epoch_budgets
    assert [epoch_budget(official, r) for r in range(6)] == [15, 30, 45, 60, 60, 60]
    smoke = get_preset("smoke").epoch_budgets
    assert [epoch_budget(smoke, r) for r in range(5)] == [1, 2, 3, 4, 4]


def test_folder_presets_count_the_data(tmp_path: Path) -> None:
    for split, n in (("train", 3), ("val", 2)):
        for cls in ("cat", "dog"):
            d = tmp_path / split / cls
            d.mkdir(parents=True)
            for i in range(n):
                (d / f"{i}.png").write_bytes(b"")
            (d / "notes.txt").write_text("not an image")
    ds = get_preset("cifar").dataset(str(tmp_path))
    assert ds == {"name": "cifar", "train_images": 6, "val_images": 4, "classes": 2, "image_size": 32, "channels": 3}
    with pytest.raises(PresetError, match="needs --data"):
        get_preset("imagenet").dataset(None)
    with pytest.raises(PresetError, match="no train/"):
        get_preset("cifar").dataset(str(tmp_path / "train"))
    with pytest.raises(PresetError, match="unknown preset"):
        get_preset("mnist")


def test_slot_utilisation_from_events() -> None:
    state = RunState()
    t = 1000.0

    def ev(dt: float, kind: str, **fields) -> None:
        state.apply({"t": t + dt, "type": kind, "seq": 0, "prev": "", **fields})

    ev(0, "run_started", run_id="x", slots=2)
    for trial, slot in (("t0000", 0), ("t0001", 1)):
        ev(0, "trial_proposed", trial=trial, arch_hash=trial, morphisms=[], hparams={}, hparam_source="seed",
           round=0, epoch_budget=1)
        ev(0, "trial_started", trial=trial, attempt=1, slot=slot, nodes=["localhost"], devices=1)
    ev(5, "trial_finished", trial="t0000", attempt=1, epochs=1, best_accuracy=0.5, reason="budget")
    ev(10, "trial_cancelled", trial="t0001", attempt=1, reason="duration")
    ev(10, "run_finished", reason="duration")
    assert state.slot_utilisation() == pytest.approx((5 + 10) / 20)
    assert state.count("finished") == 1 and state.count("cancelled") == 1
