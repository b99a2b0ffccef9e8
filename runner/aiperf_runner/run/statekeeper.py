"""The controller's side of the states rule (spec/proof.py `Retention`): keep the committed training
states the service's audit may ask for, delete the others as they are decided.

A witnessed run's trials store every state they commit (trials/<id>/states/<sha256>.safetensors). The
receipt after an epoch's `epoch_states` line decides its segments: the beacon keeps a share of them,
whose start and end states stay until the audit; so does the end of the run's best epoch so far. Every
other state of a decided line is deleted, except the last one of a trial still training (the start of
its next epoch, undecided yet). Disk stays at a few per cent of what the trials commit. An unwitnessed
run is never audited: its trials store no states at all (trial.json `keep_states`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from aiperf_runner.spec.proof import EVENT, STATES, Retention


class StateKeeper:
    def __init__(self, run_dir: Path, share: float) -> None:
        self.run_dir = Path(run_dir)
        self.fold = Retention(share)
        self.finished: set[str] = set()
        self.last_line: dict[str, int] = {}  # trial -> its latest epoch with an epoch_states line
        self.best: tuple[str, int] | None = None  # (trial, epoch) of the best epoch's line

    def replay(self, events: Iterable[Mapping[str, Any]]) -> None:
        """A resumed run: the log so far (deleting what a killed controller had not deleted yet)."""
        for ev in events:
            self.take(ev)

    def take(self, ev: Mapping[str, Any]) -> None:
        """Every line the controller logs."""
        kind = ev.get("type")
        if kind not in (EVENT, "epoch_end", "trial_started", "witness", "trial_finished"):
            return
        self.fold.take(ev)
        if kind == EVENT:
            trial = str(ev["trial"])
            self.last_line[trial] = max(self.last_line.get(trial, 0), int(ev["epoch"]))
        elif kind == "trial_finished":
            trial = str(ev["trial"])
            self.finished.add(trial)
            if (trial, self.last_line.get(trial, 0)) in self.fold.lines:  # its last state starts nothing now
                self._drop_if_unneeded((trial, self.last_line[trial]))
        elif kind == "witness":
            self._sweep(self.fold.take_decided())
        best = self.fold.best[1:] if self.fold.best is not None else None
        if best is not None and best != self.best:
            superseded, self.best = self.best, best
            if superseded is not None:
                self._drop_if_unneeded(superseded)

    def _sweep(self, decided: list[tuple[str, int]]) -> None:
        needed = self.fold.needed()
        for trial, epoch in decided:
            line = self.fold.lines[(trial, epoch)]
            digests = [str(line["start"]), *(str(c[1]) for c in line["commits"])]
            # The last state of the trial's latest line starts its next epoch: undecided while it trains.
            open_end = trial not in self.finished and epoch == self.last_line.get(trial)
            for sha in digests[:-1] if open_end else digests:
                if sha not in needed:
                    self._delete(trial, sha)

    def _drop_if_unneeded(self, key: tuple[str, int]) -> None:
        """The last state of the line `key` (a superseded best checkpoint, a finished trial's end): deleted
        unless a kept segment or the best checkpoint needs it, its line is undecided, or it starts its
        trial's next epoch."""
        trial, epoch = key
        sha = str(self.fold.lines[key]["commits"][-1][1])
        # An undecided line may start at this state (the trial's next epoch, logged before the receipt): the
        # receipt may keep that line's first segment, so the state waits for the sweep of that line.
        if sha in self.fold.needed() or sha in self._undecided_digests(trial):
            return
        if trial not in self.finished and epoch == self.last_line.get(trial):
            return
        self._delete(trial, sha)

    def _undecided_digests(self, trial: str) -> set[str]:
        out: set[str] = set()
        for key in self.fold.undecided:
            if key[0] == trial:
                line = self.fold.lines[key]
                out.add(str(line["start"]))
                out.update(str(c[1]) for c in line["commits"])
        return out

    def _delete(self, trial: str, sha: str) -> None:
        (self.run_dir / "trials" / trial / STATES / f"{sha}.safetensors").unlink(missing_ok=True)
