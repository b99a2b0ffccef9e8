"""`aiperf-runner keygen` and `aiperf-runner pack`: output, files, exit codes (0 ok, 1 failure, 2 usage)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from aiperf_runner.cli import app
from aiperf_runner.spec import bundle, keys
from typer.testing import CliRunner


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AIPERF_CONFIG_DIR", str(tmp_path / "cfg"))
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, list(args))
    return invoke


def test_keygen_prints_key_fingerprint_and_paths(cli, tmp_path: Path) -> None:
    result = cli("keygen")
    assert result.exit_code == 0, result.output
    public = keys.load_public_key(tmp_path / "cfg" / "site_key.pub")
    assert keys.public_line(public) in result.output
    assert keys.fingerprint(public) in result.output
    assert str(tmp_path / "cfg" / "site_key.pem") in result.output
    assert stat.S_IMODE((tmp_path / "cfg" / "site_key.pem").stat().st_mode) == 0o600


def test_keygen_refuses_to_overwrite_then_force_json(cli, tmp_path: Path) -> None:
    assert cli("keygen").exit_code == 0
    first = keys.public_line(keys.load_public_key())
    again = cli("keygen")
    assert again.exit_code == 1
    assert "already exists" in again.output and "--force" in again.output
    assert keys.fingerprint(keys.load_public_key()) in again.output
    assert keys.public_line(keys.load_public_key()) == first

    forced = cli("keygen", "--force", "--json")
    assert forced.exit_code == 0, forced.output
    data = json.loads(forced.stdout)
    assert data["public_key"] == keys.public_line(keys.load_public_key()) != first
    assert data["fingerprint"] == keys.fingerprint(keys.load_public_key())
    assert data["private_key_path"] == str(tmp_path / "cfg" / "site_key.pem")
    assert data["public_key_path"] == str(tmp_path / "cfg" / "site_key.pub")


def test_pack_with_the_site_key(cli, run_dir: Path) -> None:
    assert cli("keygen").exit_code == 0
    result = cli("pack", str(run_dir))
    assert result.exit_code == 0, result.output
    out = run_dir.parent / "run.tar.gz"
    assert str(out) in result.output
    assert f"{out.stat().st_size} bytes" in result.output
    fingerprint = keys.fingerprint(keys.load_public_key())
    assert fingerprint in result.output
    with tarfile.open(out) as tar:
        assert "MANIFEST.sig" in tar.getnames()
    assert bundle.check_manifest(run_dir, keys.load_public_key()) == []


def test_pack_with_key_and_output_json(cli, run_dir: Path, tmp_path: Path, site_key) -> None:
    key_dir = tmp_path / "elsewhere"
    private, _ = keys.save_key(site_key, key_dir)
    out = tmp_path / "bundles" / "mine.tgz"
    result = cli("pack", str(run_dir), "-o", str(out), "--key", str(private), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == {"bundle": str(out), "size_bytes": out.stat().st_size,
                    "fingerprint": keys.fingerprint(site_key), "run_dir": str(run_dir)}


def test_pack_failures_exit_1(cli, run_dir: Path, tmp_path: Path) -> None:
    no_key = cli("pack", str(run_dir))
    assert no_key.exit_code == 1
    assert "no private key at" in no_key.output and "keygen" in no_key.output
    assert cli("keygen").exit_code == 0
    not_run = cli("pack", str(tmp_path / "cfg"))
    assert not_run.exit_code == 1
    assert "no run.json" in not_run.output
    inside = cli("pack", str(run_dir), "-o", str(run_dir / "x.tar.gz"))
    assert inside.exit_code == 1
    assert "must not be inside the run directory" in inside.output


def test_usage_errors_exit_2(cli) -> None:
    assert cli("pack").exit_code == 2
    assert cli("keygen", "--bogus").exit_code == 2


@pytest.mark.parametrize("command", ["keygen", "pack"])
def test_help_documents_exit_codes(command: str) -> None:
    out = subprocess.run([sys.executable, "-m", "aiperf_runner", command, "--help"],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert "Exit codes: 0 success, 1 failure" in out.stdout
    assert "2 usage error" in out.stdout
