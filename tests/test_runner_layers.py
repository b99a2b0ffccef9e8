"""The runner's layering contract (pyproject.toml, `lint-imports`) holds, and it is not a contract
that cannot fail: the same check over a copy of the runner with one upward import breaks it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.helpers import REPO

LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")
LAYERS = "Runner layers"


def _runner_contracts(tmp_path: Path) -> Path:
    """An import-linter config with only the runner's contracts (root package aiperf_runner)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = [c for c in config["contracts"] if "aiperf_runner" in str(c)]
    lines = ["[importlinter]", "root_package = aiperf_runner", "exclude_type_checking_imports = true", ""]
    for i, c in enumerate(contracts):
        lines.append(f"[importlinter:contract:{i}]")
        for key, value in c.items():
            if isinstance(value, list):
                lines.append(f"{key} =")
                lines.extend(f"    {v}" for v in value)
            else:
                lines.append(f"{key} = {value}")
        lines.append("")
    path = tmp_path / "runner-contracts.ini"
    path.write_text("\n".join(lines))
    return path


def _lint(config: Path, runner_root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(runner_root)}
    return subprocess.run([LINT_IMPORTS, "--no-cache", "--config", str(config)], cwd=runner_root,
                          capture_output=True, text=True, timeout=300, env=env)


def test_the_runner_keeps_its_layers(tmp_path: Path) -> None:
    out = _lint(_runner_contracts(tmp_path), REPO / "runner")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 kept, 0 broken" in out.stdout, out.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    copy = tmp_path / "runner"
    shutil.copytree(REPO / "runner" / "aiperf_runner", copy / "aiperf_runner",
                    ignore=shutil.ignore_patterns("__pycache__"))
    probe = copy / "aiperf_runner" / "spec" / "flops.py"
    probe.write_text(probe.read_text() + "\nfrom aiperf_runner.run import controller  # noqa: E402,F401\n")
    out = _lint(_runner_contracts(tmp_path), copy)
    assert out.returncode != 0
    assert f"{LAYERS}" in out.stdout and "BROKEN" in out.stdout, out.stdout
    assert "aiperf_runner.spec is not allowed to import aiperf_runner.run" in out.stdout, out.stdout
