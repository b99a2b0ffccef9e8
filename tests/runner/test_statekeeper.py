"""The committed states a witnessed run keeps (run/statekeeper.py): those of the segments the next receipt's
beacon keeps, the best epoch's end and the start of each running trial's next epoch; nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiperf_runner.run.statekeeper import StateKeeper
from aiperf_runner.spec import proof

BEACONS = ["ab" * 32, "cd" * 32, "ef" * 32]


def _states(trial: str, epoch: int) -> dict[str, Any]:
    return {"type": "epoch_states", **proof.stand_in_states(trial, 1, epoch, 1000, 16)}


def _epoch(trial: str, epoch: int, accuracy: float) -> dict[str, Any]:
    return {"type": "epoch_end", "trial": trial, "attempt": 1, "epoch": epoch, "val_accuracy": accuracy,
            "images_trained": 1000, "images_evaluated": 500}


def _events() -> list[dict[str, Any]]:
    return [
        {"type": "trial_started", "trial": "t0000", "attempt": 1, "devices": 1},
        {"type": "trial_started", "trial": "t0001", "attempt": 1, "devices": 1},
        _states("t0000", 1), _epoch("t0000", 1, 0.5),
        _states("t0001", 1), _epoch("t0001", 1, 0.6),
        {"type": "witness", "beacon": BEACONS[0]},
        _states("t0000", 2), _epoch("t0000", 2, 0.7),
        {"type": "trial_finished", "trial": "t0000"},
        {"type": "witness", "beacon": BEACONS[1]},
    ]


def _files(run: Path) -> set[str]:
    return {p.stem for p in run.glob("trials/*/states/*.safetensors")}


def _make_files(run: Path) -> None:
    for ev in _events():
        if ev["type"] == "epoch_states":
            folder = run / "trials" / ev["trial"] / "states"
            folder.mkdir(parents=True, exist_ok=True)
            for sha in [ev["start"], *(c[1] for c in ev["commits"])]:
                (folder / f"{sha}.safetensors").write_bytes(b"state")


def _expected(share: float) -> set[str]:
    keep: set[str] = set()
    for ev, beacon in ((_states("t0000", 1), BEACONS[0]), (_states("t0001", 1), BEACONS[0]),
                       (_states("t0000", 2), BEACONS[1])):
        for seg in proof.segments_of_line(ev, 1000):
            if proof.kept(beacon, seg.key, share):
                keep.update((seg.start, seg.end))
    keep.add(_states("t0000", 2)["commits"][-1][1])  # the best epoch's end (0.7)
    keep.add(_states("t0001", 1)["commits"][-1][1])  # t0001 still trains: its next epoch starts there
    return keep


def test_only_the_states_the_audit_may_ask_for_stay(tmp_path: Path) -> None:
    for share in (0.0, 0.5, 1.0):
        run = tmp_path / f"run{share}"
        _make_files(run)
        everything = _files(run)
        keeper = StateKeeper(run, share)
        for ev in _events():
            keeper.take(ev)
        assert _files(run) == _expected(share), share
        assert len(_files(run)) < len(everything) or share == 1.0


def test_a_resumed_controller_deletes_what_the_killed_one_had_not(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _make_files(run)
    StateKeeper(run, 0.5).replay(_events())
    assert _files(run) == _expected(0.5)


def test_nothing_is_deleted_before_its_receipt(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _make_files(run)
    everything = _files(run)
    keeper = StateKeeper(run, 0.0)
    for ev in _events()[:6]:  # both trials' first epochs, no receipt yet
        keeper.take(ev)
    assert _files(run) == everything


def test_the_service_draws_from_the_kept_segments_only() -> None:
    claimed = proof.claimed(_events(), 0.5)
    assert len(claimed.segments) == 6
    assert {s.key for s in claimed.kept} == {s.key for s in claimed.segments
                                             if proof.kept(BEACONS[0 if s.key.startswith("t0001") or s.epoch == 1
                                                                   else 1], s.key, 0.5)}
    assert claimed.best is not None and (claimed.best.trial, claimed.best.epoch) == ("t0000", 2)


def test_a_superseded_best_stays_while_it_starts_an_undecided_epoch(tmp_path: Path) -> None:
    """t0000's best epoch ends where its next epoch starts; another trial's better epoch arrives before the
    receipt that decides that next epoch. The receipt may keep its first segment: the start must stay."""
    events = [
        {"type": "trial_started", "trial": "t0000", "attempt": 1, "devices": 1},
        {"type": "trial_started", "trial": "t0001", "attempt": 1, "devices": 1},
        _states("t0000", 1), _epoch("t0000", 1, 0.6),
        {"type": "witness", "beacon": BEACONS[0]},
        _states("t0000", 2), _epoch("t0000", 2, 0.5),
        {"type": "trial_finished", "trial": "t0000"},
        _states("t0001", 1), _epoch("t0001", 1, 0.7),  # supersedes t0000's epoch 1 as the best
    ]
    run = tmp_path / "run"
    for ev in events:
        if ev["type"] == "epoch_states":
            folder = run / "trials" / ev["trial"] / "states"
            folder.mkdir(parents=True, exist_ok=True)
            for sha in [ev["start"], *(c[1] for c in ev["commits"])]:
                (folder / f"{sha}.safetensors").write_bytes(b"state")
    keeper = StateKeeper(run, 0.5)  # BEACONS[0] keeps only the first segment of t0000's epoch 1
    for ev in events:
        keeper.take(ev)
    second = _states("t0000", 2)
    assert second["start"] in _files(run)
    keeper.take({"type": "witness", "beacon": BEACONS[1]})
    claimed = proof.claimed([*events, {"type": "witness", "beacon": BEACONS[1]}], 0.5)
    assert any(s.start == second["start"] for s in claimed.kept)  # BEACONS[1] keeps its first segment
    assert claimed.best is not None
    asked = {s.start for s in claimed.kept} | {s.end for s in claimed.kept} | {claimed.best.sha256}
    assert asked <= _files(run)
