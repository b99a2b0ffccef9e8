"""`aiperf-runner verify`: JSON fields, human summary, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aiperf_runner.cli import app
from aiperf_runner.spec import bundle, keys
from typer.testing import CliRunner

from devdata.runfactory import make_run
from tests.verify.test_verify import FIELDS

runner = CliRunner()


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run", slots=2, trials=6, epochs=4).path


def test_json_fields_and_exit_0(run: Path) -> None:
    result = runner.invoke(app, ["verify", str(run), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(report) == FIELDS
    assert report["integrity_ok"] is True and report["division"] == "open"


def test_human_summary_lists_every_check(run: Path) -> None:
    result = runner.invoke(app, ["verify", str(run)])
    assert result.exit_code == 0, result.output
    for name in ("integrity.chain", "validity.duration", "stability.score_cv", "plausibility.slot_exclusive"):
        assert name in result.stdout
    assert "integrity OK" in result.stdout and "division" in result.stdout


def test_integrity_failure_exits_1(run: Path) -> None:
    log = run / "events.jsonl"
    log.write_bytes(log.read_bytes().replace(b'"epoch":2', b'"epoch":7', 1))
    result = runner.invoke(app, ["verify", str(run), "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["integrity_ok"] is False
    assert runner.invoke(app, ["verify", str(run)]).exit_code == 1


def test_require_signature_and_pubkey(run: Path, tmp_path: Path) -> None:
    assert runner.invoke(app, ["verify", str(run), "--require-signature"]).exit_code == 1
    key = keys.generate_key()
    out = bundle.pack(run, tmp_path / "run.tar.gz", key)
    pub = tmp_path / "site.pub"
    pub.write_text(keys.public_line(key) + "\n")
    result = runner.invoke(app, ["verify", str(out), "--pubkey", str(pub), "--require-signature", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["fingerprint"] == keys.fingerprint(key)


@pytest.mark.parametrize("args", [
    ["verify", "/nonexistent/run"],
    ["verify", "RUN", "--rules", "v3"],
    ["verify", "RUN", "--pubkey", "/nonexistent/key.pub"],
    ["verify"],
])
def test_usage_errors_exit_2(run: Path, args: list[str]) -> None:
    args = [str(run) if a == "RUN" else a for a in args]
    assert runner.invoke(app, args).exit_code == 2


def test_rules_option(run: Path) -> None:
    result = runner.invoke(app, ["verify", str(run), "--rules", "v1-compat", "--json"])
    assert json.loads(result.stdout)["rules"] == "v1-compat"


def test_help_documents_exit_codes() -> None:
    result = runner.invoke(app, ["verify", "--help"])
    assert result.exit_code == 0
    assert "Exit codes" in result.stdout and "integrity" in result.stdout


def test_installed_entry_point(run: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "aiperf_runner", "verify", str(run), "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert set(json.loads(out.stdout)) == FIELDS
