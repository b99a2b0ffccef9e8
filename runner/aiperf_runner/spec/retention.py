"""Which trials keep their final weights for the service's audit (docs/design.md section 7, layer 3).

A trial's weights are kept when SHA-256(beacon ‖ trial id), read as a number in [0, 1), falls below
the rules table's share for the preset (`weights_keep_share`), where the beacon is that of the first
`witness` receipt logged after the trial's `trial_finished`: the site cannot know which trials will
be kept until after they end. The best trial of the run is always kept. An unwitnessed run keeps the
best trial only. `RetentionAudit` checks a log kept what the rule says (`audit.retention`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from .logaudit import Findings
from .replay import Replay, TrialState

WEIGHTS = "weights.safetensors"
"""A trial's final weights, in its directory (trials/<id>/): never in a bundle; uploaded when challenged."""


def share(th: Mapping[str, Any], preset: Any) -> float:
    table = th.get("weights_keep_share")
    if not table:  # rules 1.0 kept no weights
        return 0.0
    return float(table.get(preset, table["default"]))


def selected(beacon: str, trial: str, keep_share: float) -> bool:
    """Whether the beacon selects this trial's weights to be kept."""
    draw = int(hashlib.sha256(bytes.fromhex(beacon) + trial.encode()).hexdigest(), 16) / 2**256
    return draw < keep_share


class RetentionAudit:
    """Listens to a run's replay: the beacon each finished trial met, and what the log did with its weights."""

    def __init__(self, replay: Replay, keep_share: float) -> None:
        self.replay = replay
        self.keep_share = keep_share
        self.waiting: list[TrialState] = []  # finished with weights, no receipt logged since
        self.beacon_of: dict[str, str] = {}
        replay.listen(self)

    def on_event(self, ev: Mapping[str, Any], line: int) -> None:
        kind = ev["type"]
        if kind == "trial_finished":
            tr = self.replay.trials.get(ev["trial"])
            if tr is not None and tr.weights_sha256:
                self.waiting.append(tr)
        elif kind == "witness" and self.waiting:
            for tr in self.waiting:
                self.beacon_of.setdefault(tr.trial, str(ev["beacon"]))
            self.waiting = []

    def problems(self) -> Findings:
        found = Findings()
        finished = [tr for tr in self.replay.trials.values() if tr.weights_sha256 and tr.best_accuracy is not None]
        if not finished:
            return found
        best = max(finished, key=lambda tr: tr.best_accuracy or 0.0)
        if best.weights != "kept":
            found.add(0, f"the best trial {best.trial}'s weights were not kept")
        for tr in finished:
            beacon = self.beacon_of.get(tr.trial)
            if beacon is not None and selected(beacon, tr.trial, self.keep_share) and tr.weights == "dropped":
                found.add(0, f"trial {tr.trial} was selected by the beacon after it finished, but its weights "
                             "were dropped")
            if tr.weights == "kept" and tr.weights_reason == "beacon" and (
                    beacon is None or not selected(beacon, tr.trial, self.keep_share)):
                found.add(0, f"trial {tr.trial}'s weights are said to be kept by the beacon, which did not select them")
        return found

    def kept(self) -> dict[str, str]:
        """{trial: weights digest} of the trials whose weights the log keeps (what the service may ask for)."""
        return {tr.trial: tr.weights_sha256 for tr in self.replay.trials.values()
                if tr.weights == "kept" and tr.weights_sha256}

    def best_trial(self) -> str | None:
        finished = [tr for tr in self.replay.trials.values() if tr.weights_sha256 and tr.best_accuracy is not None]
        return max(finished, key=lambda tr: tr.best_accuracy or 0.0).trial if finished else None
