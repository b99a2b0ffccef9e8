"""`aiperf-runner stage --slurm` in a two-node allocation (salloc): one task per node packs the data into
that node's own directory (`%n`: the two slurmds run on this one machine), both packs with the same digest;
run again, each node verifies its pack instead of rewriting it. About 30 s with the cluster's start and stop.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from aiperf_runner.data import shards

from tests.helpers import REPO
from tests.slurm.cluster import RUNNER, env_for
from tests.slurm.test_stage_data import _image_folder


def _stage(conf: Path, *args: str) -> list[dict]:
    proc = subprocess.run(["salloc", "--nodes=2", "--time=5", *RUNNER, "stage", "--slurm", "--json", *args],
                          env=env_for(conf), capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return sorted((json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")),
                  key=lambda r: r["node"])


def test_stage_packs_on_every_node_of_the_allocation(two_node: Path, tmp_path: Path) -> None:
    data = _image_folder(tmp_path / "data")
    local = tmp_path / "local"
    reports = _stage(two_node, "--data", str(data), "--to", f"{local}/%n/cifar")
    assert [(r["node"], r["path"], r["packed"], r["images"]) for r in reports] == [
        ("n1", str(local / "n1" / "cifar"), True, 24), ("n2", str(local / "n2" / "cifar"), True, 24)]
    assert reports[0]["digest"] == reports[1]["digest"]
    for node in ("n1", "n2"):
        assert shards.verify(local / node / "cifar", full=True)["digest"] == reports[0]["digest"]
    again = _stage(two_node, "--data", str(data), "--to", f"{local}/%n/cifar", "--full")
    assert [(r["packed"], r["verified"], r["digest"]) for r in again] == [(False, "full", reports[0]["digest"])] * 2
