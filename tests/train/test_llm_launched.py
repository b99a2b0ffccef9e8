"""The LLM trial program started as one process per rank (as torchrun starts it on each node of a multi-node
SLURM trial): each process takes its rank from RANK / WORLD_SIZE / LOCAL_RANK and meets the others at
MASTER_ADDR:MASTER_PORT instead of spawning ranks itself; rank 0 alone writes the trial's log and files, and the
two gloo ranks train the same floats as the two the program spawns when started alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

torch = pytest.importorskip("torch")

from aiperf_runner.search.llmhparams import DEFAULTS  # noqa: E402
from aiperf_runner.spec.eventlog import read_events  # noqa: E402
from aiperf_runner.spec.llmrules import llm_preset  # noqa: E402
from aiperf_runner.train.distenv import DistEnv, free_port  # noqa: E402
from aiperf_runner.train.llm import trialmain  # noqa: E402

STEPS = 4  # a few steps: the ranks' start-up is the test, not training
TRIAL = [sys.executable, "-m", "aiperf_runner.train.llm.trialmain"]


def _trial_dir(path: Path) -> Path:
    """A seed trial of llm-smoke for two ranks, as the controller writes it (run/llmrun.py)."""
    preset = llm_preset("llm-smoke")
    path.mkdir(parents=True)
    (path / "trial.json").write_text(json.dumps({
        "trial": "t0001", "attempt": 1, "preset": preset.name, "arch": preset.seed_arch.to_dict(), "growths": [],
        "parent": None, "parent_arch": None, "hparams": {**DEFAULTS, "batch_tokens": 1024}, "steps": STEPS,
        "seed": 7, "world": 2}))
    return path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "TORCHELASTIC_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                                        "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    pythonpath = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return {**env, "PYTHONPATH": pythonpath, "AIPERF_THREADS_PER_RANK": "1", "CUDA_VISIBLE_DEVICES": "", **extra}


def _records(trial_dir: Path) -> dict[str, list[dict]]:
    events = read_events(trial_dir / "events.jsonl")
    return {kind: [e for e in events if e["type"] == kind] for kind in ("train_end", "trial_result", "trial_error")}


def test_ranks_started_by_a_launcher_train_as_the_spawned_ones(tmp_path: Path) -> None:
    launched = _trial_dir(tmp_path / "launched" / "trials" / "t0001")
    port = str(free_port())
    ranks = [subprocess.Popen([*TRIAL, str(launched)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=_env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                                                  LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
             for r in range(2)]
    spawned = _trial_dir(tmp_path / "spawned" / "trials" / "t0001")
    alone = subprocess.run([*TRIAL, str(spawned)], cwd=REPO, capture_output=True, text=True, env=_env(), timeout=120)
    outs = [rank.communicate(timeout=120)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outs
    assert alone.returncode == 0, alone.stdout[-2000:] + alone.stderr[-2000:]
    # One log, by rank 0: one training record of the two ranks, one result; no rendezvous file (nothing spawned).
    records = _records(launched)
    assert [len(records[k]) for k in ("train_end", "trial_result", "trial_error")] == [1, 1, 0], records
    assert records["train_end"][0]["world"] == 2 and records["train_end"][0]["steps"] == STEPS
    assert not list(launched.glob("rdzv-*"))
    # The same data-parallel training as the program's own two ranks: the same weights, bit for bit.
    assert records["trial_result"][0]["weights_sha256"] == _records(spawned)["trial_result"][0]["weights_sha256"]


def test_a_launcher_whose_world_is_not_the_trials_is_refused(tmp_path: Path) -> None:
    trial_dir = _trial_dir(tmp_path / "trials" / "t0001")
    spec = json.loads((trial_dir / "trial.json").read_text())
    with pytest.raises(trialmain.TrialError, match="trial.json's world is 2"):
        trialmain.run_launched(DistEnv(rank=0, world_size=3, local_world_size=3, source="torchrun"), trial_dir, spec)
    assert not (trial_dir / "events.jsonl").exists()
