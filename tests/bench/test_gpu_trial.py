"""bench/gpu_trial.py on the CPU with --tiny: the single-device columns and the DDP part run and
report consistent figures (about 10 s: two gloo processes are spawned)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import REPO


def _script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # Imported by name from bench/ on sys.path, so that the spawned DDP processes find it too.
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    return importlib.import_module("gpu_trial")


def test_tiny_check_reports_rates_and_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "figures.json"
    assert _script(monkeypatch).main(["--tiny", "--steps", "3", "--warmup", "1", "--ddp-procs", "2",
                           "--timeout", "120", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    single = figures["single"]
    assert set(single) == {"runner", "reference"}
    assert all(rate > 0 for rate in single.values())
    assert figures["ratio"] == pytest.approx(single["runner"] / single["reference"])
    printed = capsys.readouterr().out
    assert f"runner / reference: {figures['ratio']:.3f}" in printed
    ddp = figures["ddp"]
    assert ddp["world"] == 2 and ddp["images_per_s"] > 0
    assert ddp["linear"] == pytest.approx(2 * single["runner"])
    assert ddp["efficiency"] == pytest.approx(ddp["images_per_s"] / ddp["linear"])
    assert "of linear" in printed
