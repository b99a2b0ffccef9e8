"""devdata/llmfactory.py's AIPerf-LLM runs (the demo's): what spec.verify accepts at every shape the demo makes, and
what it refuses once a figure is forged, so that the demo's LLM reports are verifications, not decorations."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiperf_runner.spec import bundle, keys, peaks
from aiperf_runner.spec.verify import verify

from devdata.llmfactory import LlmMachine, LlmPlan, make_llm_run
from devdata.runfactory import TestWitness, registration_of, rewrite_events

H100 = "NVIDIA H100 80GB HBM3"


def machine(nodes: int) -> LlmMachine:
    known = peaks.lookup(H100)
    assert known is not None
    return LlmMachine(H100, 8 * nodes, nodes, "AMD EPYC 9654 96-Core Processor", 192 * nodes,
                      known.peak_flops("bf16"), system_id=7)


def verified(run: Path, witness: TestWitness) -> dict:
    key = keys.generate_key()
    bundle.write_manifest(run, key)
    return verify(run, pubkey=key.public_key(), require_signature=True, workers=1,
                  system=registration_of(run, id=7), witness_keys=witness.keys)


SHAPES = {
    "llm, one node": (LlmPlan("llm", 1, 8, 3700.0, 0.3, 30.0, 3.7, 5.8, seed=5), 1),
    "llm, 32 slots": (LlmPlan("llm", 32, 8, 3700.0, 0.3, 30.0, 3.7, 5.8, seed=6), 32),
    "llm-kjv, 16 slots": (LlmPlan("llm-kjv", 16, 1, 600.0, 0.0005, 3.0, 1.5, 2.1, seed=7), 2),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_check_passes(tmp_path: Path, shape: str) -> None:
    plan, nodes = SHAPES[shape]
    witness = TestWitness(site=1, system=7)
    made = make_llm_run(tmp_path / "run", plan, machine(nodes), witness)
    report = verified(tmp_path / "run", witness)
    failed = [f"{c['name']}: {c['message']}" for c in report["checks"] if not c["passed"]]
    assert not failed
    assert report["trials_finished"] == made.finished > 10 and report["best_loss"] <= plan.best_loss + 0.1
    assert set(report["morphisms_used"]) == {"insert_block", "widen_mlp", "add_heads"}
    assert report["division"] == ("official" if plan.preset == "llm-kjv" else "open")  # llm's gate is provisional


def test_a_forged_figure_is_caught(tmp_path: Path) -> None:
    plan, nodes = SHAPES["llm, one node"]
    witness = TestWitness(site=1, system=7)
    make_llm_run(tmp_path / "run", plan, machine(nodes), witness)

    def inflate(events: list[dict]) -> list[dict]:
        first = next(e for e in events if e["type"] == "train_end")
        first["flops"] *= 2
        return events

    rewrite_events(tmp_path / "run", inflate)
    report = verified(tmp_path / "run", witness)
    flops = next(c for c in report["checks"] if c["name"] == "integrity.flops")
    assert not flops["passed"] and "the rules count" in flops["message"] and report["rejected"]
