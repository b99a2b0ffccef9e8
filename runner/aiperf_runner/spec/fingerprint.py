"""A content-defined sample of a log's epoch records, so that the service can tell a log that
repeats another submission's epochs (whatever its run id, system or site).

An epoch record (its graph's hash, numbers, timings and accuracy, without ids) is sampled when it
is among a run's first `FIRST` counted epochs or when its end time in microseconds is a multiple of
`EVERY`; at most `MOST` digests are kept. Two honest runs share no record (timings to the
microsecond); a copied log shares all of its sample with the original.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from .replay import Attempt, TrialState

FIRST = 32
EVERY = 61
MOST = 512
RECORD = ("epoch", "images_trained", "images_evaluated", "val_accuracy", "val_loss", "started_at", "ended_at",
          "seconds")


def record_digest(ev: Mapping[str, Any], arch_hash: str) -> str:
    record = {k: ev.get(k) for k in RECORD} | {"arch_hash": arch_hash}
    return hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


class EpochFingerprints:
    """A replay listener collecting the sample (`digests`, in log order)."""

    def __init__(self) -> None:
        self.digests: list[str] = []
        self._counted = 0

    def on_epoch(self, ev: Mapping[str, Any], trial: TrialState, attempt: Attempt | None, counted: bool,
                 line: int) -> None:
        if not counted:
            return
        self._counted += 1
        if (self._counted <= FIRST or int(ev["ended_at"] * 1e6) % EVERY == 0) and len(self.digests) < MOST:
            self.digests.append(record_digest(ev, trial.arch_hash))
