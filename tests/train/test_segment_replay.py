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

TOLERANCE = 1e-3  # same machine, same threads: exact, or within rounding (rules 3.0 allow 0.2)


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


def test_a_segment_that_claims_steps_it_never_trained_has_no_ratio(tmp_path: Path) -> None:
    """Its committed end is its start (a segment of batches skipped whole): the re-execution moves away from a
    state the segment never left. No ratio (it would be infinite, which JSON and PostgreSQL cannot hold)."""
    d = write_trial_dir(tmp_path / "t0001", commit_every_steps=3)
    assert run_trial_program(d).returncode == 0
    seg = _segments(d)[0]
    verdict = _replay(d, seg, 1, end=seg.start)
    assert verdict["still"] and verdict["ratio"] is None and verdict["distance"] > 0 and not verdict["passed"], verdict
    json.dumps(verdict, allow_nan=False)  # what the audit's subprocess prints and the service stores


@pytest.mark.parametrize("other", [{"image_size": 8}, {"seed": 1}], ids=["smaller-images", "other-images"])
def test_a_segment_trained_on_other_images_does_not_replay(tmp_path: Path, other: dict[str, Any]) -> None:
    # The site trained on other images than the preset's: smaller ones (a quarter of the FLOPs charged for
    # the graph's size; its weights fit the graph all the same) or others (generated from another seed).
    # The audit re-executes on the preset's, at the preset's size.
    d = write_trial_dir(tmp_path / "t0001", commit_every_steps=3, dataset={**TINY_DATASET, **other})
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


def _image_folder(root: Path, per_class: int = 24) -> dict[str, Any]:
    """A small CIFAR-like ImageFolder of noisy 20x20 PNGs in 3 classes (decoded, cropped and flipped as cifar's)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("val", 8)):
        for c in range(3):
            folder = root / split / f"class{c}"
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = (rng.random((20, 20, 3)) * 80 + c * 80).astype("uint8")
                Image.fromarray(pixels).save(folder / f"{i}.png")
    return {"name": "cifar", "train_images": 3 * per_class, "val_images": 24, "classes": 3, "image_size": 16}


@pytest.mark.parametrize("nproc", [1, 2])
def test_segments_of_an_image_folder_replay_too(tmp_path: Path, nproc: int) -> None:
    """Images augmented in data-loader workers (random crop, flip) from each image's own seed: the replay,
    loading them in its own process, crops and flips them alike."""
    from aiperf_runner.spec.seeds import small_resnet

    dataset = _image_folder(tmp_path / "data")
    d = write_trial_dir(tmp_path / "t0001", commit_every_steps=2, dataset=dataset, preset="cifar",
                        data=str(tmp_path / "data"), graph=small_resnet(3, 16, width=8), hparams={"batch_size": 8})
    done = run_trial_program(d, "--nproc", str(nproc), env={"AIPERF_DATA_WORKERS": "2"})
    assert done.returncode == 0, done.stderr
    segs = _segments(d)
    assert segs
    for seg in segs:
        verdict = replay_segment(d, state_path(d, seg.start).read_bytes(), state_path(d, seg.end).read_bytes(),
                                 epoch=seg.epoch, first=seg.first, last=seg.last, steps=seg.steps, world=nproc,
                                 data=str(tmp_path / "data"), preset_name="cifar", dataset=dataset,
                                 tolerance=TOLERANCE)
        assert verdict["passed"], verdict
    short = replay_segment(d, state_path(d, segs[-1].start).read_bytes(), state_path(d, segs[-1].end).read_bytes(),
                           epoch=segs[-1].epoch, first=segs[-1].first, last=segs[-1].last - 1,
                           steps=segs[-1].steps, world=nproc, data=str(tmp_path / "data"), preset_name="cifar",
                           dataset=dataset, tolerance=TOLERANCE)
    assert not short["passed"]


def test_a_trial_decoded_on_its_device_replays(tmp_path: Path) -> None:
    """The `device` decoder (train/devdecode.py): crops drawn in the workers, JPEGs decoded and cropped in the
    trial's process; the audit's replay, with the decoder trial.json names, trains on the same images."""
    from aiperf_runner.spec.seeds import small_resnet

    from tests.train.test_decoders import _jpeg_folder

    _jpeg_folder(tmp_path / "data", classes=3, per_class={"train": 16, "val": 4})
    dataset = {"name": "imagenet", "train_images": 48, "val_images": 12, "classes": 3, "image_size": 16}
    d = write_trial_dir(tmp_path / "t0001", commit_every_steps=2, dataset=dataset, preset="imagenet",
                        data=str(tmp_path / "data"), data_decoder="device", graph=small_resnet(3, 16, width=8),
                        hparams={"batch_size": 8}, epoch_budget=1)
    done = run_trial_program(d, env={"AIPERF_DATA_WORKERS": "2"})
    assert done.returncode == 0, done.stderr
    segs = _segments(d)
    assert segs
    for seg in segs[:2]:
        verdict = replay_segment(d, state_path(d, seg.start).read_bytes(), state_path(d, seg.end).read_bytes(),
                                 epoch=seg.epoch, first=seg.first, last=seg.last, steps=seg.steps, world=1,
                                 data=str(tmp_path / "data"), preset_name="imagenet", dataset=dataset,
                                 tolerance=TOLERANCE)
        assert verdict["passed"], verdict
