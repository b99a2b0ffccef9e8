"""Commitments as a trial trains, and their segments re-executed as the service's audit does.

The trial program commits its state every few steps (`epoch_states`, train/trainstate.py); each
segment, trained again from its start state on the same data order and seeds (train/segment.py),
ends where the trial said (one process or two, after a kill and resume too), while a segment
whose work was cut short, or trained on other images, does not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.spec import schema
from aiperf_runner.spec.proof import segments_of_line
from aiperf_runner.train.segment import replay_segment
from aiperf_runner.train.trainstate import state_path

from tests.train.conftest import TINY_DATASET, run_trial_program, write_trial_dir
from tests.train.test_trial import CRASH

TOLERANCE = 1e-3  # same machine, same threads: exact, or within rounding (rules 3.0 allow 0.1)


def _states(d: Path) -> list[dict[str, Any]]:
    return [e for e in map(json.loads, (d / "events.jsonl").read_text().splitlines()) if e["type"] == "epoch_states"]


def _replay(d: Path, seg: Any, world: int, *, last: int | None = None, dataset: dict[str, Any] | None = None,
            end: str | None = None) -> dict[str, Any]:
    return replay_segment(d, state_path(d, seg.start).read_bytes(), state_path(d, end or seg.end).read_bytes(),
                          epoch=seg.epoch, first=seg.first, last=seg.last if last is None else last, steps=seg.steps,
                          world=world, dataset=dataset or TINY_DATASET, tolerance=TOLERANCE)


def _segments(d: Path) -> list[Any]:
    return [s for line in _states(d) for s in segments_of_line(line, line["images_trained"])]


@pytest.mark.parametrize("nproc", [1, 2])
def test_every_committed_segment_replays_to_its_end(tmp_path: Path, nproc: int) -> None:
    d = write_trial_dir(tmp_path / "t0001", commit_every_steps=2)
    done = run_trial_program(d, "--nproc", str(nproc))
    assert done.returncode == 0, done.stderr
    lines = _states(d)
    assert [line["epoch"] for line in lines] == [1, 2]
    assert all(schema.problem(line, schema.TRIAL) is None for line in lines)
    steps = 6 // nproc  # 192 images, batch 32 a rank
    # A trial's first epoch also commits after step 1 (and 2, 4, ... below the interval): see commit_points.
    assert [c[0] for c in lines[0]["commits"]] == [1] + [s for s in (2, 4, 6) if s < steps] + [steps]
    assert [c[0] for c in lines[1]["commits"]] == [s for s in (2, 4, 6) if s < steps] + [steps]
    assert lines[1]["start"] == lines[0]["commits"][-1][1]  # epoch 2 starts where epoch 1 ended
    for seg in _segments(d):
        verdict = _replay(d, seg, nproc)
        assert verdict["passed"] and verdict["ratio"] <= TOLERANCE, verdict
        assert verdict["images"] == (seg.last - seg.first) * 32 * nproc  # batch 32 on every rank


def test_a_segment_with_work_left_out_does_not_replay(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0001", commit_every_steps=3)
    assert run_trial_program(d).returncode == 0
    seg = _segments(d)[0]
    short = _replay(d, seg, 1, last=seg.last - 1)  # one of three steps skipped: what the site's end would be
    assert not short.get("error") and not short["passed"] and short["ratio"] > 0.3, short
    other = _segments(d)[1]
    wrong_end = _replay(d, seg, 1, end=other.end)
    assert not wrong_end["passed"]


def test_a_segment_trained_on_other_images_does_not_replay(tmp_path: Path) -> None:
    # The site trained on other images than the preset's (here: generated from another seed); the audit
    # re-executes on the preset's.
    small = {**TINY_DATASET, "image_size": 16, "seed": 1}
    d = write_trial_dir(tmp_path / "t0001", commit_every_steps=3, dataset=small)
    assert run_trial_program(d).returncode == 0
    seg = _segments(d)[0]
    verdict = _replay(d, seg, 1, dataset=TINY_DATASET)
    assert not verdict["passed"] and verdict["ratio"] > 0.1, verdict


@pytest.mark.slow
def test_a_killed_and_resumed_trial_keeps_one_chain(tmp_path: Path) -> None:
    d = write_trial_dir(tmp_path / "t0002", epoch_budget=3, commit_every_steps=4)
    assert run_trial_program(d, "--attempt", "1", code=CRASH.format(before=True, n=2)).returncode == 137
    assert run_trial_program(d, "--attempt", "2").returncode == 0
    lines = _states(d)
    assert [(line["epoch"], line["attempt"]) for line in lines] == [(1, 1), (2, 2), (3, 2)]
    for before, after in zip(lines, lines[1:], strict=False):
        assert after["start"] == before["commits"][-1][1]
    for seg in _segments(d):
        assert _replay(d, seg, 1)["passed"]
