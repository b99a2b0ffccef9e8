"""Fixtures shared by every test directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

# The official seed in the original AIPerf format (a copy of the reference benchmark's resnet50.json), so
# that the test vectors run in any checkout; tests/flops/test_v1compat.py checks it is the same file.
REFERENCE_COPY = Path(__file__).parent / "data" / "reference_resnet50.json"

# `make test` runs the suite in two phases (AIPERF_TEST_PHASE): `parallel`, the tests that start no service and
# run nothing long, on pytest-xdist's workers; `serial`, the rest, one at a time in each stream (the stack, the
# SLURM clusters and the real runs share this machine's cores and ports). Unset: every test.
# AIPERF_TEST_STREAM narrows the serial phase to one of two streams that scripts/test-streams.sh runs at once
# (unless SERIAL_STREAMS=1): the SLURM tests, the browser, the container build, the compose deployment and
# tests/train (half a core busy on average, measured), and the service stacks and real runs (both cores).
SERIAL_DIRS = ("slurm",)
STREAMS = ("cluster", "stack")
CLUSTER_STREAM = ("slurm", "web", "train", "runner/test_container.py", "runner/test_wheelhouse.py",
                  "service/test_compose_deploy.py")
LLM_RUN_S, LLM_RUN_MAX_S = 24, 240  # the llm_run fixture's least and most seconds


def _under(item: pytest.Item) -> str:
    return Path(str(item.fspath)).relative_to(Path(__file__).parent).as_posix()


def _serial(item: pytest.Item) -> bool:
    return bool(_under(item).split("/")[0] in SERIAL_DIRS or item.get_closest_marker("slow")
                or item.get_closest_marker("services"))


def _stream(item: pytest.Item) -> str:
    under = _under(item)
    return "cluster" if any(under == s or under.startswith(s + "/") for s in CLUSTER_STREAM) else "stack"


def _selected(item: pytest.Item, phase: str, stream: str) -> bool:
    if _serial(item) != (phase == "serial"):
        return False
    return phase != "serial" or stream not in STREAMS or _stream(item) == stream


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    phase = os.environ.get("AIPERF_TEST_PHASE", "")
    if phase not in ("parallel", "serial"):
        return
    stream = os.environ.get("AIPERF_TEST_STREAM", "")
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (keep if _selected(item, phase, stream) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def reference_resnet50() -> Path:
    return REFERENCE_COPY


class _LastSnapshot:
    """A run/progress.py display that keeps the run's last snapshot, written as JSON when the run closes it."""

    def __init__(self, path: Path) -> None:
        self.path, self.last = path, {}

    def update(self, snapshot: Any, force: bool = False) -> None:
        self.last = snapshot()

    def note(self, message: str) -> None:
        pass

    def close(self) -> None:
        self.path.write_text(json.dumps(self.last))


@pytest.fixture(scope="session")
def llm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short AIPerf-LLM run on this CPU (two slots of one process: the seed, then children grown from their
    parents' weights), made once per session: tests/runner/test_llm_run.py forges copies of it and the
    service's end-to-end test submits a copy. Read-only: copy it before changing anything.

    It ends once LLM_RUN_S have passed and a child has finished, not at a fixed duration: on a machine busy with
    other tests a 24-s run once finished no child at all (LLM_RUN_MAX_S bounds it)."""
    pytest.importorskip("torch")
    from aiperf_runner.run.llmrun import LlmRun, LlmRunConfig

    run_dir = tmp_path_factory.mktemp("llm") / "run"
    run = LlmRun.create(LlmRunConfig(slots=2, duration_s=LLM_RUN_MAX_S, devices_per_slot=1), run_dir,
                        say=lambda _: None)
    run.progress = _LastSnapshot(run_dir.parent / "last-snapshot.json")  # what `run --progress` displays
    done = threading.Event()

    def stop_when_a_child_finished() -> None:
        while not done.wait(0.5):
            trials = list(run.trials.values())
            child = any(t.loss is not None and t.parent is not None and t.proposal.growths for t in trials)
            if child and time.time() - run.started_at >= LLM_RUN_S:
                run.request_stop("stopped")
                return

    watcher = threading.Thread(target=stop_when_a_child_finished, daemon=True)
    watcher.start()
    try:
        assert run.run() in ("stopped", "exhausted")
    finally:
        done.set()
        watcher.join()
    return run_dir


@pytest.fixture(scope="session")
def llm_shard_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two text files (a seeded Markov text, 300 kB) staged as byte-level shards through the command line
    (`aiperf-runner stage --workload llm`), and a 20-second `run --workload llm --preset llm-bytes --data DIR` on
    them (two slots of one process), made once per session: tests/runner/test_llm_shards_run.py checks it and the
    service's audit test (tests/service/test_llm_audit.py) audits a copy. Read-only."""
    pytest.importorskip("torch")
    from aiperf_runner.data import llmtext

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo) + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "aiperf_runner", *argv], capture_output=True, text=True,
                              timeout=180, cwd=repo, env=env)

    root = tmp_path_factory.mktemp("llm-shards")
    text = llmtext.generate(300_000, 11, "train")
    (root / "text").mkdir()
    (root / "text" / "a.txt").write_bytes(text[:120_000])
    (root / "text" / "b.txt").write_bytes(text[120_000:])
    stage = cli("stage", "--workload", "llm", "--data", str(root / "text"), "--to", str(root / "shards"), "--json")
    assert stage.returncode == 0, stage.stderr
    run = cli("run", "--workload", "llm", "--preset", "llm-bytes", "--data", str(root / "shards"), "--slots", "2",
              "--devices-per-slot", "1", "--duration", "20s", "--out", str(root / "run"))
    assert run.returncode == 0, run.stdout + run.stderr
    return {"root": root, "text": text, "stage": json.loads(stage.stdout), "run": root / "run", "out": run.stdout}
