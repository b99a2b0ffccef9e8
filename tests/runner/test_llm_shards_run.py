"""The shard presets end to end on this CPU, through the command line: a generated text staged as byte-level shards
(`aiperf-runner stage --workload llm`), a 20-second `run --workload llm --preset llm-bytes --data DIR` (two
slots, real trials reading the shards: the seed, then children grown from their parents), verified; the audit's
re-evaluation from the shards' validation split; trials and a resume refusing shards whose manifest is not the run's.

`llm-bytes` is the `llm` preset's data path with the byte tokenizer and a seed a CPU trains in seconds: the `llm`
preset itself (GPT-2's vocabulary, a 162-million-parameter seed, a billion training tokens) needs a GPU cluster
and a corpus, and is checked here only up to its refusal of shards that do not fit it
(tests/runner/test_llm_shards.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.data import llmshards
from aiperf_runner.spec.eventlog import read_events
from aiperf_runner.spec.llmrules import AUDIT_LOSS_TOLERANCE, llm_preset
from aiperf_runner.spec.verify import verify

from tests.helpers import REPO

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # one 20-second run, shared by the module

@pytest.fixture
def staged(llm_shard_run: dict[str, Any]) -> dict[str, Any]:
    """The session's staged shards and llm-bytes run (tests/conftest.py llm_shard_run)."""
    return llm_shard_run


def _checks(report: dict[str, Any]) -> dict[str, bool]:
    return {c["name"]: c["passed"] for c in report["checks"]}


def test_a_run_on_staged_byte_shards_trains_and_verifies(staged) -> None:
    run_dir, stage = staged["run"], staged["stage"]
    assert (stage["val_tokens"], stage["train_tokens"]) == (65_536, 300_000 - 65_536)
    assert "(before the clock: not scored)" in staged["out"] and stage["digest"][:16] in staged["out"]
    report = verify(run_dir)
    checks = _checks(report)
    assert report["integrity_ok"], [c for c in report["checks"] if not c["passed"]]
    assert checks["integrity.run_json"] and checks["validity.trials"] and checks["validity.loss"], report["checks"]
    assert not checks["validity.duration"]  # 20 s: below the preset's minute
    assert report["trials_finished"] >= 1 and report["best_loss"] < llm_preset("llm-bytes").loss_gate
    run_json = json.loads((run_dir / "run.json").read_text())
    dataset = run_json["dataset"]
    assert (dataset["digest"], dataset["tokenizer"], dataset["vocab"], dataset["val_tokens"],
            dataset["train_tokens"]) == (stage["digest"], "bytes", 256, 65_536, 300_000 - 65_536)
    assert read_events(run_dir / "events.jsonl")[0]["dataset"] == dataset
    # the site's path stays in local/ (never bundled); each trial.json names the digest its shards must have
    private = json.loads((run_dir / "local" / "private.json").read_text())
    assert private["data"] == str(staged["root"] / "shards")
    assert str(staged["root"]) not in (run_dir / "run.json").read_text()
    for trial in (run_dir / "trials").iterdir():
        spec = json.loads((trial / "trial.json").read_text())
        assert spec["data_digest"] == stage["digest"] and str(staged["root"]) not in json.dumps(spec)


def test_the_audit_reevaluates_from_the_validation_shards(staged, tmp_path: Path) -> None:
    run_dir, digest = staged["run"], staged["stage"]["digest"]
    report = verify(run_dir)
    trial = report["best_trial"]
    proposed = next(e for e in read_events(run_dir / "events.jsonl")
                    if e["type"] == "trial_proposed" and e["trial"] == trial)
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps(proposed["arch"]))
    weights = run_dir / "trials" / trial / "weights.safetensors"
    # the audit worker may hold the validation shard alone: the manifest's digest binds the rest
    val_only = tmp_path / "val-only"
    val_only.mkdir()
    for name in (llmshards.MANIFEST, "text_val_000000.bin"):
        shutil.copy(staged["root"] / "shards" / name, val_only / name)

    out = subprocess.run([sys.executable, "-m", "aiperf_runner.train.llm.reevaluate", str(arch), str(weights),
                          "--preset", "llm-bytes", "--data", str(val_only), "--digest", digest], cwd=REPO,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    verdict = json.loads(out.stdout.strip().splitlines()[-1])
    assert verdict["architecture_ok"] and verdict["error"] is None and verdict["data_error"] is None, verdict
    assert verdict["targets"] == 65_536 - 1
    logged = report["kept_weights"][trial]["val_loss"]
    assert abs(verdict["val_loss"] - logged) < 1e-5 < AUDIT_LOSS_TOLERANCE, (verdict, logged)
    from aiperf_runner.train.llm.reevaluate import audit_weights, read_arch

    no_data = audit_weights(read_arch(arch), weights, "llm-bytes")
    assert "give --data DIR" in no_data["data_error"] and no_data["val_loss"] is None
    other_run = audit_weights(read_arch(arch), weights, "llm-bytes", data=val_only, digest="0" * 64)
    assert "is not the run's" in other_run["data_error"]


def test_trials_and_a_resume_refuse_other_shards(staged, tmp_path: Path) -> None:
    from aiperf_runner.run.llmrun import LlmRun, LlmRunError
    from aiperf_runner.train.llm.trialmain import trial_data

    other = tmp_path / "other"
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "t.txt").write_bytes(staged["text"][::-1])
    llmshards.write_shards([tmp_path / "text"], other)
    copy = tmp_path / "run"
    shutil.copytree(staged["run"], copy)
    (copy / "local" / "private.json").write_text(json.dumps({"data": str(other)}))
    trial_dir = copy / "trials" / "t0001"
    spec = json.loads((trial_dir / "trial.json").read_text())
    with pytest.raises(llmshards.ShardError, match="is not the run's"):
        trial_data(llm_preset("llm-bytes"), spec, trial_dir)
    with pytest.raises(LlmRunError, match="its manifest is not the one this run verified"):
        LlmRun.resume(copy, say=lambda _: None)
    (copy / "local" / "private.json").write_text(json.dumps({"data": str(staged["root"] / "shards")}))
    data = trial_data(llm_preset("llm-bytes"), spec, trial_dir)  # the run's own shards: read
    assert data.digest == staged["stage"]["digest"] and bytes(data.val[:100].astype("u1")) == staged["text"][:100]
