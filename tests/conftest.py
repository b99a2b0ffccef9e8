"""Fixtures shared by every test directory."""

from __future__ import annotations

from pathlib import Path

import pytest

# The official seed in the original AIPerf format (a copy of the reference benchmark's resnet50.json), so
# that the test vectors run in any checkout; tests/flops/test_v1compat.py checks it is the same file.
REFERENCE_COPY = Path(__file__).parent / "data" / "reference_resnet50.json"


@pytest.fixture
def reference_resnet50() -> Path:
    return REFERENCE_COPY


@pytest.fixture(scope="session")
def llm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short AIPerf-LLM run on this CPU (24 s, two slots of one process: the seed, then children grown from
    their parents' weights), made once per session: tests/runner/test_llm_run.py forges copies of it and the
    service's end-to-end test submits a copy. Read-only: copy it before changing anything."""
    pytest.importorskip("torch")
    from aiperf_runner.run.llmrun import LlmRun, LlmRunConfig

    run_dir = tmp_path_factory.mktemp("llm") / "run"
    run = LlmRun.create(LlmRunConfig(slots=2, duration_s=24, devices_per_slot=1), run_dir, say=lambda _: None)
    assert run.run() in ("duration", "exhausted")
    return run_dir
