"""The re-execution of whole AIPerf-LLM trials (`python -m aiperf_runner.train.llm.reexecute PLAN.json`) on a real
short run (tests/conftest.py llm_run), everything taken from its log: an honest seed trial and an honest child land
on their claimed weights; weights made by training a tenth of the steps, or a child replayed from changed parent
moments, land far from them; the moments' digest is logged and bound; the one-process emulation of two ranks is
a two-process gloo run of the trial program to the bit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.spec.eventlog import read_events
from aiperf_runner.spec.llmrules import REEXECUTE_TOLERANCE, llm_preset
from aiperf_runner.spec.verify import verify

from tests.helpers import REPO

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # one short run (tests/conftest.py llm_run), shared by the session

from aiperf_runner.train.llm import reexecute  # noqa: E402
from aiperf_runner.train.llm.reexecute import Plan, trial_seed  # noqa: E402
from aiperf_runner.train.llm.trainer import Budget, LlmHparams, train  # noqa: E402
from aiperf_runner.train.llm.trialmain import OPTIMIZER, WEIGHTS  # noqa: E402
from aiperf_runner.train.weights import file_sha256, load_weights, save_weights  # noqa: E402


@pytest.fixture(scope="module")
def log(llm_run: Path) -> dict[str, Any]:
    """The run's log as the audit reads it: proposals and finished lines by trial, run.json, a seed and a child."""
    events = read_events(llm_run / "events.jsonl")
    proposed = {e["trial"]: e for e in events if e["type"] == "trial_proposed"}
    finished = {e["trial"]: e for e in events if e["type"] == "trial_finished"}
    seed = next((t for t in finished if proposed[t]["parent"] is None), None)
    child = next((t for t in finished if proposed[t]["parent"] in finished and proposed[t]["growths"]), None)
    assert seed and child, f"the run finished no seed trial or no child ({sorted(finished)}): a machine too busy?"
    return {"run": llm_run, "proposed": proposed, "finished": finished, "seed": seed, "child": child,
            "run_json": json.loads((llm_run / "run.json").read_text())}


def plan_for(log: dict[str, Any], trial: str, **changes: Any) -> Plan:
    """The plan of `trial` as the service would write it: every field from the verified log and run.json, the
    files the site uploaded, the digests the log recorded."""
    proposal, run, finished = log["proposed"][trial], log["run"], log["finished"]
    fields: dict[str, Any] = {
        "proposal": proposal, "run_seed": log["run_json"]["seed"], "world": log["run_json"]["devices_per_slot"],
        "preset": log["run_json"]["preset"], "precision": log["run_json"]["precision"],
        "weights": run / "trials" / trial / WEIGHTS, "weights_sha256": finished[trial]["weights_sha256"]}
    parent = proposal["parent"]
    if parent is not None:
        fields.update(parent_arch=log["proposed"][parent]["arch"], parent_weights=run / "trials" / parent / WEIGHTS,
                      parent_optimizer=run / "trials" / parent / OPTIMIZER,
                      parent_weights_sha256=finished[parent]["weights_sha256"],
                      parent_optimizer_sha256=finished[parent]["optimizer_sha256"])
    fields.update(changes)
    return Plan(**fields)


def test_the_moments_digest_is_logged_and_kept(log) -> None:
    kept = verify(log["run"])["kept_weights"]
    for trial, line in log["finished"].items():
        digest = file_sha256(log["run"] / "trials" / trial / OPTIMIZER)
        assert line["optimizer_sha256"] == digest and line["weights_sha256"] == kept[trial]["sha256"]
        assert kept[trial]["optimizer_sha256"] == digest


def test_the_plan_is_what_the_trial_program_was_given(log) -> None:
    """The log (and run.json's seed and devices) give every field trialmain read from trial.json."""
    for trial in log["finished"]:
        given = json.loads((log["run"] / "trials" / trial / "trial.json").read_text())
        spec = plan_for(log, trial).spec()
        assert {k: given[k] for k in spec} == spec
        assert trial_seed(log["run_json"]["seed"], trial) == given["seed"]


def _trial_threads() -> int:
    """The threads each of the fixture run's trials had (run/llmrun.py: the cores over 2 slots of one process)."""
    return max(1, (os.cpu_count() or 1) // 2)


def test_an_honest_seed_trial_reexecutes_to_its_weights(log) -> None:
    verdict = reexecute.reexecute(plan_for(log, log["seed"], threads=_trial_threads()))
    assert verdict["error"] is None and verdict["data_error"] is None, verdict
    assert verdict["passed"] and verdict["ratio"] <= verdict["tolerance"] / 10, verdict
    assert verdict["steps"] == log["proposed"][log["seed"]]["steps"]
    assert verdict["equal"], verdict  # the same CPU and thread count: the same floats (here 1 and 2 threads agree too)


def test_an_honest_child_reexecutes_through_the_command(log, tmp_path) -> None:
    plan = plan_for(log, log["child"])
    doc = {"proposal": plan.proposal, "parent_arch": plan.parent_arch, "run_seed": plan.run_seed, "world": plan.world,
           "preset": plan.preset, "precision": plan.precision, "weights": str(plan.weights),
           "parent_weights": str(plan.parent_weights), "parent_optimizer": str(plan.parent_optimizer),
           "weights_sha256": plan.weights_sha256, "parent_weights_sha256": plan.parent_weights_sha256,
           "parent_optimizer_sha256": plan.parent_optimizer_sha256, "threads": _trial_threads()}
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, "-m", "aiperf_runner.train.llm.reexecute", str(tmp_path / "plan.json")],
                         cwd=REPO, capture_output=True, text=True, timeout=180)
    verdict = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and verdict["error"] is None, (verdict, out.stderr[-2000:])
    assert verdict["passed"] and verdict["ratio"] <= verdict["tolerance"] / 10 and verdict["equal"], verdict
    assert verdict["tolerance"] == REEXECUTE_TOLERANCE["fp32"]  # a CPU run's precision (run.json)


def test_a_trial_that_trained_a_tenth_of_its_steps_fails(log, tmp_path) -> None:
    trial = log["child"]
    plan = plan_for(log, trial)
    data = reexecute.training_data(llm_preset(plan.preset))
    session = reexecute.start_session(plan, data)
    steps, hp = plan.spec()["steps"], LlmHparams(**plan.spec()["hparams"])
    assert data.train is not None
    train(session, data.train, hp, Budget(steps=steps // 10), seed=plan.spec()["seed"])
    forged = tmp_path / WEIGHTS
    sha = save_weights(session.model, forged)
    # the site logged the forged weights' digest (and their loss): only the re-execution can tell
    verdict = reexecute.reexecute(plan_for(log, trial, weights=forged, weights_sha256=sha))
    assert verdict["error"] is None and not verdict["passed"], verdict
    assert verdict["ratio"] > 10 * verdict["tolerance"], verdict
    # other weights than the log recorded are refused before any training
    refused = reexecute.reexecute(plan_for(log, trial, weights=forged))
    assert not refused["passed"] and "SHA-256 is not the one the log recorded" in refused["error"], refused


def test_a_parents_changed_moments_land_elsewhere(log, tmp_path) -> None:
    """A child replayed from its parent's moments with the first moment zeroed lands away from its honest weights
    (and so would a child that trained from other moments than its parent left): the moments are part of the start
    state, which is why `trial_finished` binds them."""
    parent = log["proposed"][log["child"]]["parent"]
    moments = load_weights(log["run"] / "trials" / parent / OPTIMIZER)
    changed = {k: torch.zeros_like(v) if k.startswith("exp_avg/") else v for k, v in moments.items()}
    from safetensors.torch import save_file

    save_file(changed, str(tmp_path / OPTIMIZER))
    verdict = reexecute.reexecute(plan_for(log, log["child"], parent_optimizer=tmp_path / OPTIMIZER,
                                           parent_optimizer_sha256=None))
    assert verdict["error"] is None and not verdict["passed"], verdict
    assert verdict["ratio"] > verdict["tolerance"], verdict
    refused = reexecute.reexecute(plan_for(log, log["child"], parent_optimizer=tmp_path / OPTIMIZER))
    assert "the parent's moments" in refused["error"], refused


def test_weights_of_another_architecture_are_an_error(log) -> None:
    verdict = reexecute.reexecute(plan_for(log, log["child"], weights=log["run"] / "trials" / log["seed"] / WEIGHTS,
                                           weights_sha256=None))
    assert not verdict["passed"] and "do not fit the trial's architecture" in verdict["error"], verdict


def test_two_ranks_in_one_process_are_a_gloo_run_of_two(log, tmp_path) -> None:
    """The seed trial trained again by the trial program on two gloo processes (one thread each; 10 of its steps, for
    time): the emulation of two ranks gives the same floats."""
    trial = log["seed"]
    given = json.loads((log["run"] / "trials" / trial / "trial.json").read_text())
    proposal = {**log["proposed"][trial], "steps": 10}
    trial_dir = tmp_path / "run" / "trials" / trial
    trial_dir.mkdir(parents=True)
    (trial_dir / "trial.json").write_text(json.dumps({**given, "world": 2, "steps": 10}))
    env = {**os.environ, "AIPERF_THREADS_PER_RANK": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "aiperf_runner.train.llm.trialmain", str(trial_dir)], cwd=REPO,
                         capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    result = next(e for e in read_events(trial_dir / "events.jsonl") if e["type"] == "trial_result")
    assert result["optimizer_sha256"] == file_sha256(trial_dir / OPTIMIZER)
    verdict = reexecute.reexecute(plan_for(log, trial, proposal=proposal, world=2, weights=trial_dir / WEIGHTS,
                                           weights_sha256=result["weights_sha256"]))
    assert verdict["error"] is None and verdict["equal"] and verdict["ratio"] == 0.0, verdict
    # the same trial re-executed as one rank is another trial: its windows and batches differ
    one = reexecute.reexecute(plan_for(log, trial, proposal=proposal, weights=trial_dir / WEIGHTS,
                                       weights_sha256=None))
    assert not one["passed"], one
    shutil.rmtree(trial_dir)
