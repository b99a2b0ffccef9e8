"""The controller's view of one trial's own log (`trials/<id>/events.jsonl`), read as it grows.

`TrialTail.read()` returns the complete lines appended since the last call and folds them into the
trial log's replay (spec/replay.py), which knows the trial program's result and error per attempt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aiperf_runner.spec.replay import Replay


class TrialTail:
    def __init__(self, path: Path, trial: str) -> None:
        self.path = path
        self.trial = trial
        self.offset = 0
        self.replay = Replay()

    def result_for(self, attempt: int) -> dict[str, Any] | None:
        """The trial program's result for this attempt (or an earlier one's), if it logged one."""
        tr = self.replay.trial(self.trial)
        return tr.result_for(attempt) if tr is not None else None

    def error_for(self, attempt: int) -> str | None:
        """The message of the attempt's `trial_error`, if it logged one."""
        tr = self.replay.trial(self.trial)
        return tr.errors.get(attempt) if tr is not None else None

    def read(self) -> list[dict[str, Any]]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:  # the file was replaced by a shorter one: nothing new to read
            self.offset = size
        if size == self.offset:
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read(size - self.offset)
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out = []
        for raw in chunk[:end].split(b"\n"):
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(line, dict) or line.get("trial") != self.trial:
                continue
            self.replay.apply(line)
            out.append(line)
        return out
