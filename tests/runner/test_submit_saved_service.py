"""`aiperf-runner submit RUN_DIR`, as the operator checklist writes it: the server and token come from
what `register` saved when the options are absent (not "Missing option '--server'")."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiperf_runner.cli import app
from aiperf_runner.client.service import save_service
from aiperf_runner.spec import keys
from typer.testing import CliRunner

from tests.integrity.rundir import make_run


def test_submit_without_options_uses_the_saved_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPERF_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("AIPERF_SERVER", raising=False)
    monkeypatch.delenv("AIPERF_TOKEN", raising=False)
    keys.save_key(keys.generate_key())
    save_service("http://127.0.0.1:9", "saved-token")  # the discard port: nothing answers there
    run = make_run(tmp_path / "run")
    result = CliRunner().invoke(app, ["submit", str(run), "--retries", "0", "--timeout", "5"])
    assert "Missing option" not in result.output
    assert result.exit_code == 1, result.output
    assert "127.0.0.1:9" in result.output, result.output


def test_submit_with_nothing_saved_says_how_to_configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPERF_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("AIPERF_SERVER", raising=False)
    monkeypatch.delenv("AIPERF_TOKEN", raising=False)
    result = CliRunner().invoke(app, ["submit", str(make_run(tmp_path / "run"))])
    assert result.exit_code == 1, result.output
    assert "no AIPerf service configured" in result.output and "register" in result.output
