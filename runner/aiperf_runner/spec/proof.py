"""Proof of the work (docs/rules.md, "Audit: proof of the work"): what a trial commits as it
trains, how its segments are told apart and drawn for re-execution, and what the draw catches.

A trial commits the digest of its whole training state (weights and buffers, the optimizer's
momentum, the loss scaler) every `commit_every_steps` optimizer steps of an epoch and at the
epoch's end. The trial program writes an epoch's commitments as one `epoch_states` line just
before the epoch's `epoch_end` (the controller copies both into the witnessed main log), so they
are covered by the next receipt. A *segment* runs from one commitment to the next: its start is
the previous commitment (for a step-0 start, the previous epoch's last one, or for the first
epoch the state the trial began from), and everything that decides its steps can be recomputed by
anyone: the data order (the sampler's seed and the epoch), the step range, the learning rate
schedule, and the random numbers each rank draws (`segment_seed`).

`CommitmentAudit` holds a log to it (`witness.commitments`). `pick` draws the segments the service
re-executes, weighted by claimed work; `detection_probability` and `segments_needed` are the
argument for how many. Torch-free, as everything in spec/.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .logaudit import Findings
from .replay import Replay

SEED_FORMAT = "aiperf-segment-seed/1"
EVENT = "epoch_states"
STATES = "states"
"""A trial's committed states: trials/<id>/states/<sha256>.safetensors, kept until the service's audit is over."""


def segment_seed(trial_seed: int, rank: int, epoch: int, step: int) -> int:
    """The seed of torch's generator for one rank from `step` of `epoch` until the next commitment
    (augmentation and dropout): from the trial's seed alone, so a segment replays on its own."""
    text = f"{SEED_FORMAT}:{int(trial_seed)}:{int(rank)}:{int(epoch)}:{int(step)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def sample_seed(trial_seed: int, epoch: int, index: int) -> int:
    """The seed of one training image's augmentation in an epoch (ImageFolder data sets, whose images are
    augmented in data-loader workers): from the image alone, whichever worker and rank load it."""
    text = f"{SEED_FORMAT}:sample:{int(trial_seed)}:{int(epoch)}:{int(index)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def commit_points(steps: int, every: int, ramp: bool = False) -> list[int]:
    """The steps of an epoch of `steps` after which the state is committed: every `every`-th and the last;
    with `ramp` (a trial's first epoch) also after steps 1, 2, 4, ... below `every`. Training from a new
    start amplifies rounding the most: on the smoke network a replay with another thread count ended up to
    0.19 of a 16-step first segment's move away, and 0.006 of 4-step ones'."""
    if steps <= 0:
        return []
    every = max(1, int(every))
    points = list(range(every, steps, every))
    if ramp:
        early, step = [], 1
        while step < min(every, steps):
            early.append(step)
            step *= 2
        points = early + points
    return points + [steps]


def every_steps(th: Mapping[str, Any], preset: Any) -> int | None:
    """The rules version's commitment interval for a preset (None: the version asks for no commitments)."""
    table = th.get("commit_every_steps")
    if not table:
        return None
    return int(table.get(preset, table["default"]))


@dataclass(frozen=True)
class Segment:
    """Steps `first`..`last` (exclusive..inclusive) of one epoch of a trial, between two commitments."""

    trial: str
    attempt: int
    epoch: int
    first: int  # the step the segment starts after (0: the epoch's start)
    last: int  # the step it ends after
    steps: int  # the epoch's steps
    start: str  # SHA-256 of the state it starts from
    end: str  # SHA-256 of the state it ends with
    images: int  # the epoch's images trained, pro rata: the claimed work of the segment
    world: int = 1  # the ranks of the attempt that trained it (its trial_started's devices)
    threads: int = 0  # rank 0's intra-op threads (0: not logged)

    @property
    def key(self) -> str:
        return f"{self.trial}/{self.epoch}/{self.last}"

    def as_dict(self) -> dict[str, Any]:
        return {"trial": self.trial, "attempt": self.attempt, "epoch": self.epoch, "first": self.first,
                "last": self.last, "steps": self.steps, "start": self.start, "end": self.end, "images": self.images,
                "world": self.world, "threads": self.threads}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Segment:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def segments_of_line(ev: Mapping[str, Any], images_trained: int, world: int = 1) -> list[Segment]:
    """The segments one `epoch_states` line commits to (its epoch trained `images_trained` images on
    `world` ranks)."""
    steps = int(ev["steps"])
    out, first, start = [], 0, str(ev["start"])
    for step, digest in ev["commits"]:
        share = (int(step) - first) / steps if steps else 0.0
        out.append(Segment(str(ev["trial"]), int(ev["attempt"]), int(ev["epoch"]), first, int(step), steps, start,
                           str(digest), int(round(images_trained * share)), int(world),
                           int(ev.get("threads") or 0)))
        first, start = int(step), str(digest)
    return out


@dataclass
class CommitmentAudit:
    """Listens to a run's replay: every counted epoch must have its `epoch_states`, the commitments no
    further apart than the rules' interval, and each epoch must start from the state the one before
    it ended with."""

    replay: Replay
    every: int | None  # None: this rules version asks for no commitments (the check is not made)
    lines: dict[tuple[str, int], tuple[Mapping[str, Any], int]] = field(default_factory=dict)
    problems_seen: Findings = field(default_factory=Findings)

    def __post_init__(self) -> None:
        self.replay.listen(self)

    def on_event(self, ev: Mapping[str, Any], line: int) -> None:
        if ev["type"] != EVENT:
            return
        key = (str(ev["trial"]), int(ev["epoch"]))
        if key in self.lines:
            return  # a retried attempt re-ran the epoch before its checkpoint: the first line counts, as its epoch
        tr = self.replay.trials.get(key[0])
        if tr is not None and key[1] <= tr.last_epoch:
            self.problems_seen.add(line, f"trial {key[0]} epoch {key[1]}: its states come after the epoch was "
                                         "logged; they are logged before it")
            return
        commits = ev["commits"]
        steps = int(ev["steps"])
        points = [int(s) for s, _ in commits]
        if not points or points != sorted(set(points)) or points[-1] != steps or points[0] <= 0:
            self.problems_seen.add(line, f"trial {key[0]} epoch {key[1]}: commitments at steps {points} do not rise "
                                         f"to the epoch's {steps} steps")
        elif self.every is not None:
            gaps = [b - a for a, b in zip([0, *points], points, strict=False)]
            if max(gaps) > self.every:
                self.problems_seen.add(line, f"trial {key[0]} epoch {key[1]}: {max(gaps)} steps between commitments, "
                                             f"more than the rules' {self.every}")
        self.lines[key] = (ev, line)

    def problems(self) -> Findings:
        """What the log's commitments leave unproven (nothing when the rules ask for none)."""
        found = Findings()
        if self.every is None:
            return found
        found.count, found.messages = self.problems_seen.count, list(self.problems_seen.messages)
        for trial, tr in self.replay.trials.items():
            if not tr.epochs_counted:
                continue
            previous_end: str | None = None
            for epoch in range(1, tr.last_epoch + 1):
                got = self.lines.get((trial, epoch))
                if got is None:
                    found.add(0, f"trial {trial} epoch {epoch}: no epoch_states line: the epoch's work is not "
                                 "committed")
                    previous_end = None
                    continue
                ev, line = got
                if previous_end is not None and ev["start"] != previous_end:
                    found.add(line, f"trial {trial} epoch {epoch}: starts from state {str(ev['start'])[:12]}, not the "
                                    f"state epoch {epoch - 1} ended with ({previous_end[:12]})")
                previous_end = str(ev["commits"][-1][1]) if ev["commits"] else None
        return found

    def segment_count(self) -> int:
        """How many segments the log commits to (one per commitment)."""
        return sum(len(ev["commits"]) for ev, _line in self.lines.values())


@dataclass(frozen=True)
class Checkpoint:
    """The state an epoch ended with, and what its epoch_end claims it scores."""

    trial: str
    epoch: int
    sha256: str
    val_accuracy: float
    images_evaluated: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Claimed:
    """What a log's commitments put up for the audit: its segments, weighted by the work its epoch_end
    lines claim (not by what the states lines say), the ones the beacons kept (`kept`: all of them in an
    unwitnessed log, which is never audited), and the checkpoint of its best accuracy."""

    segments: list[Segment]
    best: Checkpoint | None
    kept: list[Segment] = field(default_factory=list)


def keep_share(th: Mapping[str, Any], preset: Any) -> float:
    """The share of committed segments whose states a witnessed run keeps for the audit."""
    table = th.get("states_keep_share") or {"default": 1.0}
    return float(table.get(preset, table["default"]))


def kept(beacon: str, key: str, share: float) -> bool:
    """Whether the beacon of the receipt after a segment's commitment keeps its states."""
    draw = int(hashlib.sha256(bytes.fromhex(beacon) + key.encode()).hexdigest(), 16) / 2**256
    return draw < share


class Retention:
    """The fold over a main log that says which committed states must exist until the audit: the start and
    end of every segment the next receipt's beacon keeps, and the end of the run's best epoch so far.
    The runner deletes the others as they are decided (run/statekeeper.py); the service draws from the
    kept segments only (`claimed`)."""

    def __init__(self, share: float) -> None:
        self.share = share
        self.lines: dict[tuple[str, int], Mapping[str, Any]] = {}
        self.epochs: dict[tuple[str, int], Mapping[str, Any]] = {}
        self.devices: dict[tuple[str, int], int] = {}
        self.undecided: list[tuple[str, int]] = []  # lines no receipt has followed yet
        self.kept_keys: set[str] = set()
        self.kept_digests: set[str] = set()  # the kept segments' starts and ends
        self.decided: list[tuple[str, int]] = []  # since the caller last asked (`take_decided`)
        self.best: tuple[float, str, int] | None = None  # (accuracy, trial, epoch) of the best epoch so far
        self.witnessed = False

    def take(self, ev: Mapping[str, Any]) -> None:
        kind = ev.get("type")
        if kind == EVENT:
            key = (str(ev["trial"]), int(ev["epoch"]))
            if key not in self.lines:
                self.lines[key] = ev
                self.undecided.append(key)
        elif kind == "epoch_end":
            key = (str(ev["trial"]), int(ev["epoch"]))
            if key not in self.epochs:  # the first counts, as in the score
                self.epochs[key] = ev
                accuracy = float(ev["val_accuracy"])
                if key in self.lines and (self.best is None or accuracy > self.best[0]):
                    self.best = (accuracy, key[0], key[1])
        elif kind == "trial_started":
            self.devices[(str(ev["trial"]), int(ev["attempt"]))] = max(1, int(ev.get("devices") or 1))
        elif kind == "witness":
            self.witnessed = True
            for key in self.undecided:
                for seg in segments_of_line(self.lines[key], 0):
                    if kept(str(ev["beacon"]), seg.key, self.share):
                        self.kept_keys.add(seg.key)
                        self.kept_digests.update((seg.start, seg.end))
            self.decided.extend(self.undecided)
            self.undecided = []

    def take_decided(self) -> list[tuple[str, int]]:
        out, self.decided = self.decided, []
        return out

    def best_checkpoint(self) -> Checkpoint | None:
        if self.best is None:
            return None
        _accuracy, trial, epoch = self.best
        line, end = self.lines[(trial, epoch)], self.epochs[(trial, epoch)]
        return Checkpoint(trial, epoch, str(line["commits"][-1][1]), float(end["val_accuracy"]),
                          int(end["images_evaluated"]))

    def needed(self) -> set[str]:
        """Digests that must stay: the kept segments' starts and ends, and the best checkpoint."""
        best = self.best_checkpoint()
        return self.kept_digests | ({best.sha256} if best is not None else set())

    def segments(self) -> list[Segment]:
        """Every committed segment of a counted epoch, weighted by its epoch_end's images."""
        out: list[Segment] = []
        for key, end in self.epochs.items():
            line = self.lines.get(key)
            if line is None or not line.get("commits"):
                continue
            world = self.devices.get((key[0], int(end["attempt"])), 1)
            out.extend(segments_of_line(line, int(end["images_trained"]), world))
        return out


def claimed(events: Iterable[Mapping[str, Any]], share: float = 1.0) -> Claimed:
    """One pass over a main log's events (verified already: this trusts their types). `share`: the rules'
    `states_keep_share` for the run's preset."""
    fold = Retention(share)
    for ev in events:
        fold.take(ev)
    segments = fold.segments()
    kept_segments = [s for s in segments if s.key in fold.kept_keys] if fold.witnessed else segments
    return Claimed(segments, fold.best_checkpoint(), kept_segments)


# ---- the draw ----------------------------------------------------------------------------------------------
def pick(segments: Sequence[Segment], n: int, seed: int, *, flops: Mapping[str, float] | None = None) -> list[Segment]:
    """`n` distinct segments drawn with probability proportional to their claimed work (images x the
    trial's FLOPs per image when given), without replacement (Efraimidis and Spirakis' keys)."""
    rng = random.Random(seed)
    keyed = []
    for s in segments:
        weight = s.images * (flops or {}).get(s.trial, 1.0)
        if weight <= 0:
            continue
        keyed.append((rng.random() ** (1.0 / weight), s))
    keyed.sort(key=lambda kv: kv[0], reverse=True)
    return [s for _, s in keyed[:max(0, n)]]


def detection_probability(skipped: float, segments: int) -> float:
    """The chance that `segments` draws weighted by claimed work meet at least one segment whose work
    was not done, when a share `skipped` of the claimed work was not (drawn with replacement: without
    it the chance is higher, so this is the bound a cheat can count on)."""
    if skipped <= 0:
        return 0.0
    if skipped >= 1:
        return 1.0
    return 1.0 - (1.0 - skipped) ** segments


def segments_needed(skipped: float, probability: float) -> int:
    """The fewest draws that catch a run skipping a share `skipped` of its work with at least `probability`."""
    return max(1, math.ceil(math.log(1.0 - probability) / math.log(1.0 - skipped)))


# ---- simulated runs ----------------------------------------------------------------------------------------
def stand_in_digest(trial: str, epoch: int, step: int) -> str:
    """A simulated trial's stand-in for the digest of its state after `step` of `epoch` (0, 0: its start)."""
    return hashlib.sha256(f"stand-in:{trial}:{epoch}:{step}".encode()).hexdigest()


def stand_in_states(trial: str, attempt: int, epoch: int, images_trained: int, every: int) -> dict[str, Any]:
    """The `epoch_states` fields of a simulated epoch (backends/sim.py, the tests' run factories): two
    segments of `every` steps, chained to the epoch before. The log's checks accept them; no state
    behind them exists, so a re-execution cannot."""
    steps = 2 * max(1, int(every))
    start = stand_in_digest(trial, epoch - 1, steps) if epoch > 1 else stand_in_digest(trial, 0, 0)
    return {"trial": trial, "attempt": attempt, "epoch": epoch, "steps": steps, "images_trained": images_trained,
            "start": start, "commits": [[s, stand_in_digest(trial, epoch, s)] for s in commit_points(steps, every)]}
