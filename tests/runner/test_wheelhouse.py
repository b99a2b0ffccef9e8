"""`make wheelhouse` builds wheels from which the runner installs into a fresh venv with no index.

The runner without its [train] extra (torch is a multi-GB CUDA wheel): what verify, pack, submit
and estimate need. Building downloads from PyPI (skipped without it, failed under
AIPERF_REQUIRE_SERVICES=1); the install uses `pip --no-index` only. About 45 s (less with pip's cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO, need_service


def sh(*argv: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    # Without PYTHONPATH: the fresh venv must see only what it installed.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_NO_INDEX")}
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)


def test_wheelhouse_installs_the_runner_with_no_index(tmp_path: Path) -> None:
    wheels = tmp_path / "wheelhouse"
    build = sh("make", "-s", "wheelhouse", f"WHEELHOUSE={wheels}", f"PY={sys.executable}")
    reachable = build.returncode == 0 or not any(
        s in build.stderr for s in ("Could not find a version", "NewConnectionError", "Network is unreachable",
                                    "Temporary failure in name resolution", "No matching distribution"))
    need_service(reachable, f"no package index to build the wheelhouse from: {build.stderr[-300:]}")
    assert build.returncode == 0, build.stderr[-3000:]
    assert [p.name for p in wheels.glob("aiperf_runner-*.whl")] and "--no-index" in build.stdout

    venv = tmp_path / "venv"
    assert sh(sys.executable, "-m", "venv", venv).returncode == 0
    install = sh(venv / "bin" / "pip", "install", "--no-index", "--find-links", wheels, "aiperf-runner")
    assert install.returncode == 0, install.stderr[-3000:]
    out = sh(venv / "bin" / "aiperf-runner", "estimate", "--accelerator-model", "H100", "--accelerators-per-node",
             "8", "--nodes", "2", "--duration", "1h", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["node_hours"] == 2, out.stderr
    where = sh(venv / "bin" / "python", "-c", "import aiperf_runner; print(aiperf_runner.__file__)")
    assert where.stdout.startswith(str(venv)), where.stdout  # the installed wheel, not this checkout
