"""`report` (terminal, --json, --html) and `status` on a run made with the fake trial."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from aiperf_runner.run.state import RunState

from tests.runner.conftest import cli, run_controller


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("FAKE_EPOCH_S", "0.2")
        mp.setenv("FAKE_TRIAL_FAIL", "t0003@*")
        run_dir = tmp_path_factory.mktemp("report") / "run"
        run_controller(run_dir, duration_s=6.0, max_retries=1)
    finally:
        mp.undo()
    return run_dir


def test_report_json_has_the_fields(finished_run: Path) -> None:
    out = cli("report", str(finished_run), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    state = RunState.load(finished_run)
    assert data["trials_finished"] == state.count("finished") >= 4
    assert data["trials_failed"] == 1  # t0003, after its retry
    assert set(data["morphisms"]) >= {"deeper", "wider", "skip"}
    assert sum(data["morphisms"].values()) == sum(len(t.morphisms) for t in state.trials.values())
    assert set(data["hparam_sources"]) >= {"seed", "inherited", "tpe"}
    assert sum(data["hparam_sources"].values()) == len(state.trials)
    assert data["hparam_sources"]["seed"] >= 1
    assert 0.5 < data["max_accuracy"] <= 1.0
    assert 0.0 < data["slot_utilisation"] <= 1.0
    assert data["score_ops"] > 0 and data["regulated_score_ops"] > 0
    assert data["integrity_ok"] is True
    assert data["status"] == "finished" and data["finish_reason"] == "duration"


def test_report_html_is_self_contained(finished_run: Path, tmp_path: Path) -> None:
    html_path = tmp_path / "report.html"
    out = cli("report", str(finished_run), "--html", str(html_path))
    assert out.returncode == 0, out.stderr
    text = html_path.read_text()
    assert "Score and regulated score" in text and "Best validation accuracy" in text and "Trials per slot" in text
    assert "plotly.js v" in text or "Plotly" in text  # the library is inlined...
    assert not re.search(r"<script[^>]+src=", text)  # ...not fetched from anywhere
    assert text.count("Plotly.newPlot") == 3


def test_report_terminal_summary(finished_run: Path) -> None:
    out = cli("report", str(finished_run))
    assert out.returncode == 0, out.stderr
    for word in ("trials", "morphisms", "slot utilisation", "max accuracy", "score"):
        assert word in out.stdout


def test_status_of_a_finished_run(finished_run: Path) -> None:
    data = json.loads(cli("status", str(finished_run), "--json").stdout)
    assert data["status"] == "finished" and data["slots_busy"] == 0
    text = cli("status", str(finished_run)).stdout
    assert "finished (duration)" in text


def test_status_and_report_of_a_missing_run(tmp_path: Path) -> None:
    assert cli("status", str(tmp_path / "nope")).returncode == 1
    assert cli("report", str(tmp_path / "nope")).returncode == 1
