"""Trials' resume checkpoints (`trials/<id>/checkpoint.pt`) on the controller's side: when they go.

The trial program (train/trial.py) writes the checkpoint after every epoch and removes it itself
when it logs its result. Everything else is the controller's: a checkpoint is kept while an
attempt of its trial may still resume from it (running, or failed with a retry to come) and is
deleted as soon as the trial can no longer run again — finished (also when its process died in
teardown after writing the result), failed for good, or cancelled — and for every trial once the
run has finished, since a finished run cannot be resumed. A checkpoint is hundreds of MB per trial
on large models; without this a long run's directory grew by one per failed or cancelled trial.
The kept weights (`weights.safetensors`, run/weightkeeper.py) are not checkpoints and are not touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

CHECKPOINT = "checkpoint.pt"
# The statuses (spec/replay.py) of a trial that will not run again within this run.
DONE = frozenset({"finished", "failed", "cancelled"})


def drop(trial_dir: Path) -> int:
    """Delete the trial's checkpoint and a half-written one beside it; the bytes freed."""
    freed = 0
    for path in (trial_dir / CHECKPOINT, trial_dir / (CHECKPOINT + ".tmp")):
        try:
            freed += path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            pass
    return freed


def drop_all(trials_dir: Path, trial_ids: Iterable[str]) -> int:
    """`drop` for each trial; the bytes freed."""
    return sum(drop(trials_dir / trial) for trial in trial_ids)
