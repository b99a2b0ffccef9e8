"""`make wheelhouse` builds wheels from which the runner installs into a fresh venv with no index.

Two installs: the runner without its [train] extra (what verify, pack, submit and estimate need;
about 45 s with its build), and with it, torch included (its CPU build, see conftest.CPU_TORCH), from
the session's [train] wheelhouse that test_container.py builds its image from. Building downloads
from PyPI (skipped without it, failed under AIPERF_REQUIRE_SERVICES=1); the installs use
`pip --no-index` only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.runner.conftest import CPU_TORCH, build_wheelhouse, sh


def fresh_venv_install(tmp_path: Path, wheels: Path, requirement: str) -> Path:
    venv = tmp_path / "venv"
    assert sh(sys.executable, "-m", "venv", venv).returncode == 0
    # --no-compile: the bytecode of all of torch would take longer than the rest of the install.
    install = sh(venv / "bin" / "pip", "install", "-q", "--no-compile", "--no-index", "--find-links", wheels,
                 requirement, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    where = sh(venv / "bin" / "python", "-c", "import aiperf_runner; print(aiperf_runner.__file__)")
    assert where.stdout.startswith(str(venv)), where.stdout  # the installed wheel, not this checkout
    return venv


def test_wheelhouse_installs_the_runner_with_no_index(tmp_path: Path) -> None:
    wheels = build_wheelhouse(tmp_path, train=False)
    assert not list(wheels.glob("torch-*.whl"))
    venv = fresh_venv_install(tmp_path, wheels, "aiperf-runner")
    out = sh(venv / "bin" / "aiperf-runner", "estimate", "--accelerator-model", "H100", "--accelerators-per-node",
             "8", "--nodes", "2", "--duration", "1h", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["node_hours"] == 2, out.stderr


@pytest.mark.slow
def test_the_train_wheelhouse_installs_torch_with_no_index(tmp_path: Path, train_wheelhouse: Path) -> None:
    venv = fresh_venv_install(tmp_path, train_wheelhouse, "aiperf-runner[train]")
    # [train] imports, and torch is the pinned build (not this machine's torch). torchvision is only
    # installed: PyPI's is built for CUDA and does not import beside torch's CPU build (the smoke and
    # fashion-mnist presets never import it; cifar and imagenet need a matching pair).
    probe = sh(venv / "bin" / "python", "-c",
               "import importlib.metadata as m, optuna, safetensors, scipy, torch, aiperf_runner.train.trial; "
               "print(torch.__version__, m.version('torchvision'), torch.__file__)")
    assert probe.returncode == 0, probe.stderr[-3000:]
    torch, torchvision, where = probe.stdout.split()
    assert f"torch=={torch}" in CPU_TORCH and f"torchvision=={torchvision}" in CPU_TORCH, probe.stdout
    assert where.startswith(str(venv)), where
