"""`status` and `report` of an AIPerf-LLM run: tokens, growths and the best validation loss where an image run has
epochs, morphisms and accuracy; the figures are the ones `verify` gives, and `report --html` charts the loss."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from aiperf_runner.cli import app
from aiperf_runner.spec.eventlog import read_events
from aiperf_runner.spec.verify import verify
from typer.testing import CliRunner

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # the session's short AIPerf-LLM run (tests/conftest.py llm_run)

runner = CliRunner()


def test_status_says_tokens_loss_and_the_verified_score(llm_run: Path) -> None:
    verified = verify(llm_run)
    result = runner.invoke(app, ["status", str(llm_run), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["workload"] == "llm" and info["epochs"] is None and info["best_accuracy"] is None
    assert info["best_loss"] == verified["best_loss"] and info["tokens_trained"] == verified["tokens_trained"] > 0
    # FLOPs of the finished trials over the run's time: the score verify computes, from the same log
    assert math.isclose(info["score_ops"], verified["score_ops"], rel_tol=1e-3), (info["score_ops"], verified)
    text = runner.invoke(app, ["status", str(llm_run)]).stdout
    assert f"{verified['tokens_trained']:,} tokens" in text and f"loss      {verified['best_loss']:.4f} nats" in text
    assert "epochs" not in text and "accuracy" not in text


def test_report_counts_growths_and_charts_the_loss(llm_run: Path, tmp_path: Path) -> None:
    verified = verify(llm_run)
    result = runner.invoke(app, ["report", str(llm_run), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    proposed = [g["kind"] for e in read_events(llm_run / "events.jsonl") if e["type"] == "trial_proposed"
                for g in e["growths"]]
    assert set(summary["morphisms"]) == {"insert_block", "widen_mlp", "add_heads"}
    assert sum(summary["morphisms"].values()) == len(proposed) > 0
    assert summary["best_loss"] == verified["best_loss"] and summary["tokens_trained"] == verified["tokens_trained"]
    text = runner.invoke(app, ["report", str(llm_run)]).stdout
    assert "best validation loss" in text and "growths" in text and "max accuracy" not in text
    page = tmp_path / "report.html"
    result = runner.invoke(app, ["report", str(llm_run), "--html", str(page)])
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert "Best validation loss" in html and "<th>validation loss</th>" in html
    assert f"<td>{verified['best_loss']:.4f}</td>" in html  # the best trial, first
