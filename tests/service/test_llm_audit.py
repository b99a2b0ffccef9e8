"""The audit of an AIPerf-LLM result (leaderboard/audit.py with leaderboard/llmaudit.py), run as the audit task
runs it: a challenged LLM result, its signed bundle stored (a copy of the real short run of tests/conftest.py
llm_run), its best trial's weights received as evidence. The honest weights pass audit.weights,
audit.architecture and audit.loss; a log that recorded a lower loss than the weights reach (a trial program
inflating its result at the source) fails audit.loss, and the submission ends rejected naming the trial."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.spec import bundle, keys
from aiperf_runner.spec.llmflops import LlmArch
from aiperf_runner.spec.llmrules import AUDIT_LOSS_TOLERANCE, REEXECUTE_TOLERANCE, audited_precision
from aiperf_runner.spec.verify import verify
from aiperf_runner.train.weights import file_sha256
from django.core.files.uploadedfile import SimpleUploadedFile

from leaderboard import audit, llmaudit
from leaderboard.models import Result, Submission, System

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # one short run (tests/conftest.py llm_run), shared by the session


@pytest.fixture(autouse=True)
def one_thread(monkeypatch) -> None:
    """The re-evaluation's torch on one thread: on a shared 2-core machine, two spinning threads took 20x longer
    (the result is the same on any number: spec/llmrules.py AUDIT_LOSS_TOLERANCE)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def packed(llm_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run's signed bundle (no weights in it, as a site packs it) and what its verification kept."""
    run = tmp_path_factory.mktemp("llm-audit") / "run"
    shutil.copytree(llm_run, run)
    report = verify(run)
    return {"bundle": bundle.pack(run, run.parent / "run.tar.gz", keys.generate_key()), "run": run,
            "best": report["best_trial"], "kept": report["kept_weights"]}


@pytest.fixture(scope="module")
def packed_shards(llm_shard_run: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The signed bundle of the session's llm-bytes run on staged shards (tests/conftest.py llm_shard_run)."""
    run = tmp_path_factory.mktemp("llm-shard-audit") / "run"
    shutil.copytree(llm_shard_run["run"], run)
    report = verify(run)
    return {"bundle": bundle.pack(run, run.parent / "run.tar.gz", keys.generate_key()), "run": run,
            "best": report["best_trial"], "kept": report["kept_weights"], "shards": llm_shard_run["root"] / "shards"}


def challenged(packed: dict[str, Any], settings, logged_shift: float = 0.0, preset: str = "llm-smoke") -> Result:
    """A verified LLM result challenged for its best trial, the bundle stored and the weights received;
    `logged_shift` added to the loss its report says the log recorded."""
    from devdata import demo

    demo.generate(3)
    result = Result.objects.filter(submission__status=Submission.Status.PUBLISHED).order_by("pk").first()
    best = packed["best"]
    kept = {t: dict(v) for t, v in packed["kept"].items()}
    kept[best]["val_loss"] += logged_shift
    Result.objects.filter(pk=result.pk).update(workload=Result.Workload.LLM, preset=preset,
                                               audit=Result.Audit.PENDING,
                                               report={"kept_weights": kept, "best_trial": best})
    stored = Path(settings.MEDIA_ROOT) / "bundles" / "llm.tar.gz"
    stored.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(packed["bundle"], stored)
    sub = result.submission
    sub.challenge, sub.bundle = [best], "bundles/llm.tar.gz"
    sub.save(update_fields=["challenge", "bundle"])
    weights = (packed["run"] / "trials" / best / "weights.safetensors").read_bytes()
    audit.receive_evidence(sub, best, SimpleUploadedFile("weights.safetensors", weights))
    return Result.objects.get(pk=result.pk)


def test_honest_weights_pass_the_llm_audit(db, packed, settings) -> None:
    result = challenged(packed, settings)
    assert audit.run(result.submission_id) == Result.Audit.PASSED
    stored = Result.objects.get(pk=result.pk)
    [checks] = stored.audit_report["trials"].values()
    assert [c["name"] for c in checks] == ["audit.weights", "audit.architecture", "audit.loss"], checks
    assert all(c["passed"] for c in checks), checks
    assert abs(checks[2]["measured"]) < 1e-5  # CPU against CPU: the same evaluation to float rounding
    assert "segments" not in stored.audit_report  # an LLM run commits no segments


def test_a_loss_logged_lower_than_the_weights_reach_rejects_the_submission(db, packed, settings) -> None:
    result = challenged(packed, settings, logged_shift=-3 * AUDIT_LOSS_TOLERANCE)
    assert audit.run(result.submission_id) == Result.Audit.FAILED
    sub = Submission.objects.get(pk=result.submission_id)
    assert sub.status == Submission.Status.REJECTED
    assert not Result.objects.filter(pk=result.pk, published=True).exists()  # gone, or kept off the list (editions)
    [reason] = sub.reasons
    assert reason["check"] == "audit.loss", sub.reasons
    assert f"trial {packed['best']}:" in reason["message"] and "do not reach the logged loss" in reason["message"]


def test_without_the_presets_text_the_audit_waits(db, packed, settings, monkeypatch) -> None:
    """The service's own lack (llm-kjv's Debian packages not installed on the audit worker) leaves the audit
    pending, saying why: the site is not rejected for it."""
    result = challenged(packed, settings)
    monkeypatch.setattr(audit, "_reevaluated", lambda argv: {"data_error": "apt-get install bible-kjv"})
    assert audit.run(result.submission_id) == Result.Audit.PENDING
    stored = Result.objects.get(pk=result.pk)
    assert "cannot make the validation text" in stored.audit_report["message"]
    assert Submission.objects.get(pk=result.submission_id).status == Submission.Status.PUBLISHED


def test_the_architecture_is_the_verified_logs_not_the_runs_trial_json(packed, tmp_path) -> None:
    """A site that rewrites a trial's trial.json (to fit weights of another shape) changes nothing: the audit
    loads the weights into the architecture the log proposed, whose FLOPs were counted."""
    from aiperf_runner.spec.llmgrowth import replay

    run = Path(shutil.copytree(packed["run"], tmp_path / "run"))
    trial_json = run / "trials" / packed["best"] / "trial.json"
    spec = json.loads(trial_json.read_text())
    logged = spec["arch"]
    spec["arch"] = replay(LlmArch.from_dict(logged), [{"kind": "insert_block", "index": 0,
                                                       "layer": logged["layers"][0]}]).to_dict()
    trial_json.write_text(json.dumps(spec))
    assert llmaudit.proposals(run)[packed["best"]]["arch"] == logged


def test_a_shard_presets_audit_reads_the_services_validation_shards(db, packed_shards, settings) -> None:
    """`llm-bytes` (a shard preset, as `llm` is): its validation shards are the service's to hold
    (AIPERF_AUDIT_DATA, as image presets' validation images are), checked against the run's manifest digest."""
    settings.AIPERF_AUDIT_DATA = {"llm-bytes": str(packed_shards["shards"])}
    result = challenged(packed_shards, settings, preset="llm-bytes")
    assert audit.run(result.submission_id) == Result.Audit.PASSED
    [checks] = Result.objects.get(pk=result.pk).audit_report["trials"].values()
    assert all(c["passed"] for c in checks) and abs(checks[2]["measured"]) < 1e-5, checks


def test_without_a_shard_presets_validation_shards_the_audit_waits(db, packed_shards, settings) -> None:
    settings.AIPERF_AUDIT_DATA = {}
    result = challenged(packed_shards, settings, preset="llm-bytes")
    assert audit.run(result.submission_id) == Result.Audit.PENDING
    assert "no validation data for preset 'llm-bytes'" in Result.objects.get(pk=result.pk).audit_report["message"]
    assert Submission.objects.get(pk=result.submission_id).status == Submission.Status.PUBLISHED


# ---- whole trials re-executed (audit.reexecute) ---------------------------------------------------------------------
WITNESSED = [{"name": "witness.token", "passed": True}]


def report_of(packed: dict[str, Any]) -> dict[str, Any]:
    """The run's verification report as a witnessed run's would be (the session's run is not witnessed)."""
    report = verify(packed["run"])
    return {**report, "checks": [*report["checks"], *WITNESSED]}


def with_proof(result: Result, proof: dict[str, Any], files: dict[str, Path]) -> Submission:
    """`proof` set on the result's submission and every state it asks for received (`files`: digest -> file)."""
    from leaderboard.models import wanted_state_list

    sub = result.submission
    sub.proof = proof
    sub.save(update_fields=["proof"])
    for wanted in wanted_state_list(proof):
        data = files[wanted["sha256"]].read_bytes()
        audit.receive_state(sub, wanted["sha256"], SimpleUploadedFile("state.safetensors", data))
    return sub


def run_files(run: Path, proof: dict[str, Any]) -> dict[str, Path]:
    from leaderboard.models import wanted_state_list

    return {w["sha256"]: run / w["path"] for w in wanted_state_list(proof)}


def test_the_draw_takes_the_best_and_binds_each_trials_start(packed) -> None:
    report = report_of(packed)
    drawn = llmaudit.draw(report, seed=1)
    picked = {e["trial"]: e for e in drawn["reexecute"]}
    assert report["best_trial"] in picked and len(picked) == min(3, drawn["of"]), drawn
    kept = report["kept_weights"]
    for trial, entry in picked.items():
        assert entry["weights"] == kept[trial]["sha256"]
        if entry["parent"] is not None:  # a child: its parent's weights and moments, as the log recorded them
            assert (entry["parent_weights"], entry["parent_optimizer"]) == (
                kept[entry["parent"]]["sha256"], kept[entry["parent"]]["optimizer_sha256"])
    assert llmaudit.draw({**report, "checks": report["checks"][:-1]}, seed=1) == {}  # unwitnessed: never


def test_honest_trials_re_execute_to_the_weights_they_claim(db, packed, settings) -> None:
    result = challenged(packed, settings)
    proof = llmaudit.draw(report_of(packed), seed=2)
    with_proof(result, proof, run_files(packed["run"], proof))
    assert audit.run(result.submission_id) == Result.Audit.PASSED
    reexecuted = Result.objects.get(pk=result.pk).audit_report["reexecuted"]
    assert set(reexecuted) == {e["trial"] for e in proof["reexecute"]}
    for [check] in reexecuted.values():
        assert check["name"] == "audit.reexecute" and check["passed"], check
        assert check["measured"] <= check["threshold"], check  # on the trainer's CPU: bit-identical, or nearly


def test_a_trial_that_trained_a_tenth_of_its_steps_fails_the_re_execution(db, packed, settings, tmp_path) -> None:
    """A trial whose program trained a tenth of its logged 40 steps (its weights and the log's digest of them are
    what it did; its loss, logged truly, re-evaluates right): only training it again can tell."""
    from aiperf_runner.train.llm.reexecute import Plan, replay
    from safetensors.torch import save_file

    report = report_of(packed)
    proposed = llmaudit.proposals(packed["run"])
    children = [t for t in report["kept_weights"] if t != packed["best"] and proposed[t].get("parent")]
    trial = (children or [t for t in report["kept_weights"] if t != packed["best"]])[0]
    entry = llmaudit.drawable(trial, proposed[trial].get("parent"), report["kept_weights"])
    assert entry is not None
    files = run_files(packed["run"], {"reexecute": [entry]})
    run = json.loads((packed["run"] / "run.json").read_text())
    parent = entry["parent"]
    short = Plan(proposal={**proposed[trial], "steps": proposed[trial]["steps"] // 10}, run_seed=run["seed"],
                 world=run["devices_per_slot"], preset="llm-smoke", weights=files[entry["weights"]],
                 parent_arch=proposed[parent]["arch"] if parent else None,
                 parent_weights=files.get(entry.get("parent_weights", "")),
                 parent_optimizer=files.get(entry.get("parent_optimizer", "")))
    forged = tmp_path / "weights.safetensors"
    save_file({k: v.contiguous() for k, v in replay(short).final.items()}, str(forged))
    sha = file_sha256(forged)
    files[sha] = forged
    result = challenged(packed, settings)
    with_proof(result, {"reexecute": [{**entry, "weights": sha}], "of": 1, "finished": 1}, files)
    assert audit.run(result.submission_id) == Result.Audit.FAILED
    sub = Submission.objects.get(pk=result.submission_id)
    assert sub.status == Submission.Status.REJECTED
    [reason] = sub.reasons
    assert reason["check"] == "audit.reexecute", sub.reasons
    assert f"trial {trial} (40 steps" in reason["message"]
    assert "not what the trial's logged steps make" in reason["message"], reason


def test_a_cpu_run_claiming_bf16_is_held_to_fp32s_tolerance(db, packed, settings, tmp_path) -> None:
    """run.json's `precision` is the site's word: bf16's looser tolerance is for a system with accelerators (the
    trainer's bf16 is CUDA's autocast). The registered system here has none, so the claim gives fp32's."""
    assert audited_precision("bf16", 8) == "bf16" and audited_precision("bf16", 0) == "fp32"
    run = Path(shutil.copytree(packed["run"], tmp_path / "run"))
    for name in ("MANIFEST.json", "MANIFEST.sig"):
        (run / name).unlink(missing_ok=True)
    run_json = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**run_json, "precision": "bf16"}))  # the claim, in the bundle
    claimed = {**packed, "run": run, "bundle": bundle.pack(run, tmp_path / "run.tar.gz", keys.generate_key())}
    result = challenged(claimed, settings)
    Result.objects.filter(pk=result.pk).update(precision="bf16")
    System.objects.filter(pk=result.system_id).update(accelerator_count=0)
    report = report_of(packed)
    entry = llmaudit.drawable(packed["best"], llmaudit.proposals(packed["run"])[packed["best"]].get("parent"),
                              report["kept_weights"])
    assert entry is not None
    proof = {"reexecute": [entry], "of": 1, "finished": 1}
    with_proof(result, proof, run_files(packed["run"], proof))
    assert audit.run(result.submission_id) == Result.Audit.PASSED
    [[check]] = Result.objects.get(pk=result.pk).audit_report["reexecuted"].values()
    assert check["threshold"] == REEXECUTE_TOLERANCE["fp32"], check
