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
                              "--duration", duration, "--out", str(run), "--progress", "plain", "--keep-states"],
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


# ---- the committed work re-executed (rules 3.0) ---------------------------------------------------------------
def _claimed(run: Path) -> Any:
    from aiperf_runner.spec import proof
    from aiperf_runner.spec.runio import RunDir

    return proof.claimed(e.data for e in RunDir(run).events())


def _states(run: Path) -> dict[str, Path]:
    return {p.stem: p for p in run.glob("trials/*/states/*.safetensors")}


def _proof_checks(trial: dict[str, Any], segments: list[Any], best: dict[str, Any] | None,
                  states: dict[str, Path] | None = None) -> dict[str, Any]:
    seconds: dict[str, float] = {}
    work = audit.proof_checks({"segments": [s.as_dict() for s in segments], "best": best},
                              states or _states(trial["run"]), trial["run"], None, "smoke", "fp32", "3.0", seconds)
    assert set(seconds) == ({"segments"} if segments else set()) | ({"best"} if best else set())
    return work


def test_committed_segments_replay_and_the_best_checkpoint_reevaluates(trial) -> None:
    from aiperf_runner.spec import proof

    claimed = _claimed(trial["run"])
    assert claimed.segments and claimed.best is not None
    started = {e["trial"]: e["devices"] for e in map(json.loads, (trial["run"] / "events.jsonl").read_text().splitlines())
               if e["type"] == "trial_started"}
    assert all(s.world == started[s.trial] for s in claimed.segments)  # the ranks of the slot that trained it
    picked = proof.pick(claimed.segments, 3, seed=1)
    work = _proof_checks(trial, picked, claimed.best.as_dict())
    replays = [c for checks in work["segments"].values() for c in checks]
    assert [c["name"] for c in replays] == ["audit.replay"] * len(picked)
    assert all(c["passed"] for c in replays), replays
    # Exact where the audit runs as many threads as the trial did; within the tolerance where not.
    assert all(c["measured"] is not None and c["measured"] <= c["threshold"] for c in replays), replays
    [best] = work["best"]
    assert best["name"] == "audit.best" and best["passed"], best
    assert abs(best["measured"]) < 0.002 and "the run's best accuracy" in best["message"]


def test_a_segment_that_did_not_do_its_work_fails_audit_replay(trial, tmp_path) -> None:
    claimed = _claimed(trial["run"])
    seg, other = claimed.segments[0], claimed.segments[-1]
    # The end state the site committed is not what the segment's steps make from its start.
    forged = type(seg)(**{**seg.as_dict(), "end": other.end})
    [check] = _proof_checks(trial, [forged], None)["segments"][f"{seg.trial}/{seg.epoch}/{seg.last}"]
    assert not check["passed"] and check["name"] == "audit.replay"
    assert "the committed work is not what the segment does" in check["message"], check
    # A state that is not even a state of this trial's graph.
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a state")
    states = {**_states(trial["run"]), seg.start: junk}
    [check] = _proof_checks(trial, [seg], None, states)["segments"][f"{seg.trial}/{seg.epoch}/{seg.last}"]
    assert not check["passed"] and "not re-executed (start state: not a safetensors file" in check["message"], check


def test_a_best_accuracy_logged_higher_than_its_checkpoint_fails_audit_best(trial) -> None:
    claimed = _claimed(trial["run"])
    assert claimed.best is not None
    best = {**claimed.best.as_dict(), "val_accuracy": min(claimed.best.val_accuracy + 0.2, 1.0)}
    [check] = _proof_checks(trial, [], best)["best"]
    assert not check["passed"] and "re-evaluated accuracy" in check["message"], check


def _trained_on_the_validation_images(trial: dict[str, Any], dest: Path) -> float:
    """The trial's architecture fitted to the public validation split alone, from a fresh start, until it
    knows every image (a site tuning to the images it is judged on); its weights saved at `dest`; its accuracy
    on those images.

    From a fresh start, not from the trial's weights: fine-tuned, a trial that already generalises well gains
    little on images it has not seen, and how well it generalises depends on how many epochs a busy machine
    gave the fixture's short run (one CI run's fine-tuned model reached 0.974 on the public images and 0.9615
    on the private split, inside the tolerance). Fitted to the 2,000 public images alone, it reaches 1.000 on
    them and about 0.955 on the private split (measured), a gap of about twice the tolerance."""
    from aiperf_runner.train.data import DataSpec, build_data
    from aiperf_runner.train.precision import setup_precision
    from aiperf_runner.train.trial import evaluate

    spec = DataSpec.from_trial(json.loads((trial["dir"] / "trial.json").read_text()))
    graph = Graph.from_json(json.loads((trial["dir"] / "graph.json").read_text()))
    torch.manual_seed(0)
    model = build_module(graph, num_classes=spec.num_classes)
    data = build_data(spec, batch_size=64, shuffle_seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    accuracy = 0.0
    for epoch in range(1, 61):
        model.train()
        for images, labels in data.val:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(data.normalizer(images)), labels).backward()
            optimizer.step()
        if epoch % 5 == 0:
            totals = evaluate(model, data, setup_precision("fp32", torch.device("cpu")), torch.device("cpu")).tolist()
            accuracy = totals[1] / totals[0]
            if accuracy == 1.0:
                break
    save_weights(model, dest)
    return accuracy


def test_rules_31_evaluate_smoke_on_a_private_split(trial, tmp_path, settings) -> None:
    """From rules 3.1 a smoke model is re-evaluated on images no runner reads (the service's private split):
    the honest weights pass within the tolerance of two samples; a model trained on the public validation
    images reaches an accuracy there that the private split does not confirm."""
    settings.AIPERF_AUDIT_PRIVATE_SEED = 1234
    verdict = audit.evaluate(trial["dir"], trial["weights"], None, "smoke", audit.private_split("3.1"))
    assert verdict["split"] == "private" and verdict["images"] == 2000, verdict
    checks = {c["name"]: c for c in audit.trial_checks("t", trial["weights"], trial["logged"], verdict, "3.1")}
    assert not failed(checks), checks
    assert "private split" in checks["audit.accuracy"]["message"]
    assert not audit.private_split("3.0")

    tuned = tmp_path / "tuned.safetensors"
    on_public = _trained_on_the_validation_images(trial, tuned)
    assert on_public >= 0.995, on_public  # the forgery itself: the public images all but learnt by heart
    logged = {**trial["logged"], "sha256": sha256(tuned), "val_accuracy": on_public}
    public = audit.evaluate(trial["dir"], tuned, None, "smoke")
    assert abs(public["accuracy"] - on_public) < 0.002  # the public images confirm what it logged
    private = audit.evaluate(trial["dir"], tuned, None, "smoke", True)
    print(f"fitted to the public images: {on_public:.4f} there, {private['accuracy']:.4f} on the private split")
    checks = {c["name"]: c for c in audit.trial_checks("t", tuned, logged, private, "3.1")}
    assert failed(checks) == {"audit.accuracy"}, (on_public, private["accuracy"], checks)
