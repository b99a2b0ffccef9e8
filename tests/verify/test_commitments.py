"""audit.commitments (rules 3.0): every counted epoch's training state committed in the log, in a chain,
and the draw of segments for re-execution with the detection probability docs/rules.md states."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.spec import proof
from aiperf_runner.spec.verify import verify

from devdata.runfactory import make_run, rewrite_events


def _check(report: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == "audit.commitments")


def test_a_run_that_commits_its_epochs_passes(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", slots=2, trials=4, epochs=3, retry_trials={1})
    check = _check(verify(run.path))
    assert check["passed"], check
    assert "24 segments" in check["message"]  # 12 epochs of two segments


def test_a_run_that_commits_nothing_is_not_official(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", slots=2, trials=3, epochs=2, commitments=False)
    report = verify(run.path)
    check = _check(report)
    assert not check["passed"] and "trial t0000 epoch 1: no epoch_states line" in check["message"]
    assert report["division"] == "open" and not report["rejected"]
    # Under the rules before 3.0 the check is not made.
    assert not [c for c in verify(run.path, rules_version="2.0")["checks"] if c["name"] == "audit.commitments"]


def _edit(path: Path, fn: Any) -> None:
    def edit(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in events:
            if e["type"] == "epoch_states" and e["trial"] == "t0001" and e["epoch"] == 2:
                out = fn(e, events)
                if out is not None:
                    return out
        return events
    rewrite_events(path, edit)


@pytest.mark.parametrize("forgery, message", [
    ("restart", "trial t0001 epoch 2: starts from state"),
    ("gap", "steps between commitments, more than the rules' 16"),
    ("late", "its states come after the epoch was logged"),
    ("short", "do not rise to the epoch's"),
])
def test_a_broken_chain_of_commitments_is_named(tmp_path: Path, forgery: str, message: str) -> None:
    run = make_run(tmp_path / "run", slots=2, trials=3, epochs=3)

    def forge(e: dict[str, Any], events: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        if forgery == "restart":  # the epoch began from some other state than the one epoch 1 ended with
            e["start"] = proof.stand_in_digest("t0001", 0, 0)
        elif forgery == "gap":
            e["commits"] = [[e["steps"], e["commits"][-1][1]]]
        elif forgery == "short":
            e["commits"] = e["commits"][:-1]
        elif forgery == "late":  # logged after its epoch_end
            i = events.index(e)
            j = next(k for k in range(i + 1, len(events)) if events[k]["type"] == "epoch_end"
                     and events[k]["trial"] == e["trial"] and events[k]["epoch"] == e["epoch"])
            events.insert(j, events.pop(i))
            return events
        return None

    _edit(run.path, forge)
    check = _check(verify(run.path))
    assert not check["passed"] and message in check["message"], check


def test_how_many_segments_catch_a_quarter_of_the_work_skipped() -> None:
    assert proof.segments_needed(0.25, 0.99) == 17
    assert proof.detection_probability(0.10, 17) == pytest.approx(0.8332, abs=1e-4)
    assert proof.detection_probability(0.25, 17) == pytest.approx(0.9925, abs=1e-4)
    assert proof.detection_probability(0.50, 17) > 0.99999


def test_the_draw_meets_the_skipped_work_as_often_as_stated() -> None:
    # 400 segments of unequal work; the cheat skipped whole segments making up a quarter of it.
    rng = random.Random(7)
    segs = [proof.Segment(f"t{i:04d}", 1, 1, 0, 64, 64, "0" * 64, "1" * 64, rng.randint(1000, 9000))
            for i in range(400)]
    total = sum(s.images for s in segs)
    skipped: set[str] = set()
    work = 0
    for s in sorted(segs, key=lambda s: rng.random()):
        if work + s.images > 0.25 * total:
            continue
        skipped.add(s.key)
        work += s.images
    caught = sum(any(s.key in skipped for s in proof.pick(segs, 17, seed)) for seed in range(3000))
    assert caught / 3000 >= 0.985  # stated: at least 0.9925 (draws with replacement); without, a little more
    # Heavier segments are drawn more often.
    heavy = max(segs, key=lambda s: s.images)
    light = min(segs, key=lambda s: s.images)
    drawn = [s.key for seed in range(3000) for s in proof.pick(segs, 17, seed)]
    assert drawn.count(heavy.key) > 2 * drawn.count(light.key)


def test_a_services_own_rules_version_cannot_change_what_the_runner_keeps() -> None:
    from aiperf_runner.spec import rules

    with pytest.raises(ValueError, match="states_keep_share cannot change: the runner applies them"):
        rules.add_versions({"3.0-mine": {"base": "3.0", "states_keep_share": {"default": 0.5}}})
    assert "3.0-mine" not in rules.THRESHOLDS
    assert rules.add_versions({"3.0-mine": {"base": "3.0", "audit_segments": 4}}) == ["3.0-mine"]
    del rules.THRESHOLDS["3.0-mine"]
