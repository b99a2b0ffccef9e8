"""The audit worker's checks (leaderboard/audit.py) on the weights of a real smoke trial.

A short real run (torch on this CPU) gives a trial, its safetensors weights and its logged accuracy;
the re-evaluation runs as the worker runs it (`python -m aiperf_runner.train.reevaluate` in a subprocess
with limits). The honest weights pass every `audit.*` check; each forgery fails its named one.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402
from aiperf_runner.search import morphism  # noqa: E402
from aiperf_runner.spec.graph import Graph  # noqa: E402
from aiperf_runner.spec.retention import WEIGHTS  # noqa: E402
from aiperf_runner.spec.verify import verify  # noqa: E402
from aiperf_runner.train.builder import build_module  # noqa: E402
from aiperf_runner.train.weights import save_weights  # noqa: E402

from leaderboard import audit  # noqa: E402
from tests.helpers import REPO  # noqa: E402

pytestmark = pytest.mark.slow
RULES = "2.0"


@pytest.fixture(scope="module")
def trial(tmp_path_factory) -> dict[str, Any]:
    """The best trial of a short real smoke run: its directory, weights and what the log kept. 25 seconds
    finish several trials on an idle machine; a busy one may finish none, and then gets a longer run."""
    for duration in ("25s", "90s"):
        run = tmp_path_factory.mktemp("audit") / "run"
        out = subprocess.run([sys.executable, "-m", "aiperf_runner", "run", "--preset", "smoke", "--slots", "1",
                              "--duration", duration, "--out", str(run), "--progress", "plain"],
                             cwd=REPO, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        report = verify(run)
        best = report["best_trial"]
        if best is not None:
            return {"run": run, "id": best, "dir": run / "trials" / best,
                    "weights": run / "trials" / best / WEIGHTS, "logged": report["kept_weights"][best]}
    raise AssertionError(f"no trial finished in a {duration} smoke run")


def audit_checks(trial_dir: Path, weights: Path, logged: dict[str, Any]) -> dict[str, dict[str, Any]]:
    verdict = audit.evaluate(trial_dir, weights, None, "smoke")
    return {c["name"]: c for c in audit.trial_checks("t", weights, logged, verdict, RULES)}


def failed(checks: dict[str, dict[str, Any]]) -> set[str]:
    return {name for name, c in checks.items() if not c["passed"]}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_honest_weights_pass_every_audit_check(trial) -> None:
    checks = audit_checks(trial["dir"], trial["weights"], trial["logged"])
    assert not failed(checks), checks
    assert abs(checks["audit.accuracy"]["measured"]) < 0.002  # the same images, the same evaluation code
    assert "2000 images" in checks["audit.accuracy"]["message"]


def test_accuracies_raised_by_005_fail_audit_accuracy(trial) -> None:
    logged = {**trial["logged"], "val_accuracy": min(trial["logged"]["val_accuracy"] + 0.05, 1.0)}
    checks = audit_checks(trial["dir"], trial["weights"], logged)
    assert failed(checks) == {"audit.accuracy"}
    message = checks["audit.accuracy"]["message"]
    assert f"logged {logged['val_accuracy']:.4f}" in message and "re-evaluated accuracy" in message


def deeper(graph: Graph) -> Graph:
    """One morphism away: one more conv-BN-ReLU (tensors the trial's module does not have)."""
    return morphism.deeper(graph, rng=random.Random(1))[0]


def wider(graph: Graph) -> Graph:
    """One morphism away: a convolution with more filters (tensors of other shapes)."""
    return morphism.wider(graph, rng=random.Random(1))[0]


def test_weights_of_a_neighbour_architecture_fail_audit_architecture(trial, tmp_path) -> None:
    graph = Graph.from_json(json.loads((trial["dir"] / "graph.json").read_text()))
    other = build_module(deeper(graph), num_classes=10)
    path = tmp_path / WEIGHTS
    digest = save_weights(other, path)  # the forged log records the digest of what it uploads
    checks = audit_checks(trial["dir"], path, {**trial["logged"], "sha256": digest})
    assert failed(checks) == {"audit.architecture", "audit.accuracy"}
    assert "do not fit the trial's graph" in checks["audit.architecture"]["message"]


def test_a_graph_swapped_for_a_larger_one_fails_audit_architecture(trial, tmp_path) -> None:
    forged = Path(shutil.copytree(trial["dir"], tmp_path / "trial"))
    graph = Graph.from_json(json.loads((forged / "graph.json").read_text()))
    (forged / "graph.json").write_text(json.dumps(wider(graph).to_json()))
    checks = audit_checks(forged, trial["weights"], trial["logged"])
    assert failed(checks) == {"audit.architecture", "audit.accuracy"}


def test_a_pickle_fails_audit_weights(trial, tmp_path) -> None:
    path = tmp_path / WEIGHTS
    from safetensors.torch import load_file

    torch.save(load_file(str(trial["weights"])), path)  # the same tensors, pickled
    checks = audit_checks(trial["dir"], path, {**trial["logged"], "sha256": sha256(path)})
    assert "audit.weights" in failed(checks)
    assert "not a readable safetensors file" in checks["audit.weights"]["message"]


def test_a_truncated_file_fails_audit_weights(trial, tmp_path) -> None:
    path = tmp_path / WEIGHTS
    data = trial["weights"].read_bytes()
    path.write_bytes(data[: len(data) // 2])
    checks = audit_checks(trial["dir"], path, {**trial["logged"], "sha256": sha256(path)})
    assert "audit.weights" in failed(checks)


def test_weights_whose_digest_differs_fail_audit_weights(trial, tmp_path) -> None:
    path = tmp_path / WEIGHTS
    data = bytearray(trial["weights"].read_bytes())
    data[-1] ^= 1  # one bit of one weight
    path.write_bytes(bytes(data))
    checks = audit_checks(trial["dir"], path, trial["logged"])
    assert "audit.weights" in failed(checks)
    assert "not the logged one" in checks["audit.weights"]["message"]
