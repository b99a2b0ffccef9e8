"""What the rules measure in a run's main log, gathered in one streaming pass (spec/rules.py checks it).

`LogAudit.feed(event, line)` checks each line's time and schema (spec/schema.py), hands the
well-formed ones to the run's `Replay` (spec/replay.py: the lifecycle of trials, attempts and
slots), and listens to it: its anomalies become findings, and each epoch is checked against the
timestamps, the data set's sizes and its slot's peak. Memory stays bounded: counts and the first
few messages of each kind of finding, plus small per-trial maps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from . import schema
from .replay import Attempt, Replay, TrialState

MAX_MESSAGES = 5


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _count(v: Any, minimum: int) -> int | None:
    return v if type(v) is int and v >= minimum else None


class Findings:
    """A count of problems and the first few messages (memory stays bounded)."""

    __slots__ = ("count", "messages")

    def __init__(self) -> None:
        self.count = 0
        self.messages: list[str] = []

    def add(self, line: int, message: str) -> None:
        self.count += 1
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(f"line {line}: {message}" if line else message)

    def text(self, ok: str) -> str:
        if not self.count:
            return ok
        more = f" (and {self.count - len(self.messages)} more)" if self.count > len(self.messages) else ""
        return "; ".join(self.messages) + more


class LogAudit:
    """Feeds a `Replay` and gathers what the schema and plausibility checks measure.

    `flops_for(trial)` gives (train, eval) FLOP/image of a trial or None; `slot_peak(devices)` the
    peak FLOP/s of a slot with that many devices, or None if no peak is known.
    """

    def __init__(self, run: Mapping[str, Any], th: Mapping[str, Any], replay: Replay,
                 flops_for: Callable[[str], tuple[float, float] | None] | None = None,
                 slot_peak: Callable[[int], float | None] | None = None) -> None:
        self.th = th
        self.replay = replay
        self.flops_for = flops_for
        self.slot_peak = slot_peak
        self.run_id = run.get("run_id")
        # The schema of the spec version run.json declares (a log is read as the version it was written to;
        # versions differ only in run_started, so the planned lines of spec/epochplan.py need no choice).
        self.spec = schema.for_version(run.get("spec_version"))
        self._main_types = self.spec.types(schema.MAIN)
        cfg = _dict(run.get("config"))
        self.run_slots = _count(cfg.get("slots"), 1)
        ds = _dict(run.get("dataset"))
        self.val_images = _count(ds.get("val_images"), 0)
        self.train_images = _count(ds.get("train_images"), 0)
        self.skew = float(th["clock_skew_s"])
        self.images_cap = (None if self.train_images is None else
                           self.train_images * (1.0 + th["epoch_images_slack"]) + th["epoch_images_pad"])

        self.events = 0
        self.schema = Findings()
        self.consistency = Findings()    # run_started vs run.json, order of run events
        self.lifecycle = Findings()      # proposed -> started -> epochs -> ended, epoch numbering
        self.slot_clash = Findings()     # a slot running two trials at once
        self.concurrency = Findings()    # more trials running than slots / slot out of range
        self.timestamps = Findings()
        self.validation = Findings()     # images_evaluated != val_images
        self.images = Findings()         # images_trained over the dataset
        self.epoch_rate = Findings()
        self.max_epoch_ratio: float | None = None
        self.max_epoch_rate: float | None = None
        self._last_t: float | None = None
        self._last_ended: dict[str, float] = {}
        self._last_attempt: dict[str, int] = {}  # the attempt of each trial's last epoch line
        self._slot_peaks: dict[int, float | None] = {}  # devices -> slot_peak(devices), asked once
        self._by_anomaly = {"lifecycle": self.lifecycle, "slot_clash": self.slot_clash,
                            "concurrency": self.concurrency, "consistency": self.consistency,
                            "malformed": self.schema}
        if replay.slots is None:
            replay.slots = self.run_slots
        replay.listen(self)

    # ---- what the checks read ------------------------------------------------------------------------
    @property
    def slots(self) -> int | None:
        return self.replay.slots

    @property
    def max_concurrency(self) -> int:
        return self.replay.max_running

    @property
    def repeated_epochs(self) -> int:
        return self.replay.repeated_epochs

    # ---- feeding -----------------------------------------------------------------------------------------
    def feed(self, data: Mapping[str, Any], line: int) -> None:
        """One line of the log, whatever its type."""
        self.events += 1
        self._time(data["t"], line)
        if data["type"] == "epoch_end" and schema.valid_epoch_end(data):
            self.replay.epoch(data, line)
            return
        # The compiled check first (one call); the first bad field is looked for only when it fails.
        kind = data["type"]
        problem = (None if type(kind) is str and kind in self._main_types and self.spec.valid(data)
                   else self.spec.problem(data))
        if problem is not None:
            self.schema.add(line, problem)
            return
        self.replay.apply(data, line)

    def feed_valid(self, data: Mapping[str, Any], line: int) -> None:
        """`feed` for a line of a main-log type other than `epoch_end` already found well-formed
        (`schema.valid`; spec/epochplan.py checks the lines it plans with)."""
        self.events += 1
        self._time(data["t"], line)
        self.replay.apply(data, line)

    def epoch_checked(self, data: Mapping[str, Any], line: int) -> None:
        """`feed` for an `epoch_end` already found well-formed (`schema.valid_epoch_end`): the hot path."""
        self.events += 1
        t = data["t"]
        last_t = self._last_t
        if last_t is not None and t < last_t:
            self.timestamps.add(line, f"event time {t} is before the previous event's {last_t}")
        elif last_t is None or t > last_t:
            self._last_t = t
        self.replay.epoch(data, line)

    def _time(self, t: float, line: int) -> None:
        if self._last_t is not None and t < self._last_t:
            self.timestamps.add(line, f"event time {t} is before the previous event's {self._last_t}")
        self._last_t = t if self._last_t is None else max(t, self._last_t)

    def finish(self) -> None:
        """Call after the last event: checks of the log as a whole."""
        if self.events and not self.replay.run_started:
            self.consistency.add(1, "no run_started event")

    # ---- listening to the replay -----------------------------------------------------------------------
    def on_anomaly(self, kind: str, line: int, message: str) -> None:
        self._by_anomaly[kind].add(line, message)

    def on_event(self, data: Mapping[str, Any], line: int) -> None:
        kind = data["type"]
        if kind == "run_started":
            if data["run_id"] != self.run_id:
                self.consistency.add(line, f"run id {data['run_id']} differs from run.json's {self.run_id}")
            if self.run_slots is not None and data["slots"] != self.run_slots:
                self.consistency.add(line, f"{data['slots']} slots, run.json config says {self.run_slots}")
        elif kind == "run_resumed" and data["run_id"] != self.run_id:
            self.consistency.add(line, f"run id {data['run_id']} differs from run.json's {self.run_id}")

    def on_epoch(self, d: Mapping[str, Any], tr: TrialState, attempt: Attempt | None, counted: bool,
                 line: int) -> None:
        """The epoch's checks. The chunked fold makes them again, vectorised, to tell the epochs it
        may fold without this (spec/epochscan.py `_rows`, spec/epochplan.py `plan`): a check added
        here goes there too, and into tests/verify/test_epoch_checks.py, which proves them alike."""
        trial, epoch, t = tr.trial, d["epoch"], d["t"]
        started, ended = d["started_at"], d["ended_at"]
        skew = self.skew
        if ended < started:
            self.timestamps.add(line, f"trial {trial} epoch {epoch} ends ({ended}) before it starts ({started})")
        if ended > t + skew:
            self.timestamps.add(line, f"trial {trial} epoch {epoch} ended_at {ended} is after the line "
                                      f"recording it was written ({t}; tolerance {skew:g} s)")
        if attempt is not None and started < attempt.started - skew:
            self.timestamps.add(line, f"trial {trial} epoch {epoch} started_at {started} is before the "
                                      f"trial started ({attempt.started}; tolerance {skew:g} s)")
        prev_end = self._last_ended.get(trial)
        if prev_end is not None and ended < prev_end:
            self.timestamps.add(line, f"trial {trial} epoch {epoch} ends before its previous epoch")
        # One process times an attempt's epochs with one clock: no skew between them, and they cannot
        # overlap (claimed overlapping epochs would spread one epoch's work over more seconds than it had).
        if prev_end is not None and self._last_attempt.get(trial) == d["attempt"] and started < prev_end:
            self.timestamps.add(line, f"trial {trial} epoch {epoch} starts ({started}) before the epoch before it "
                                      f"in its attempt ended ({prev_end}): an attempt's epochs do not overlap")
        self._last_ended[trial] = ended if prev_end is None else max(ended, prev_end)
        self._last_attempt[trial] = d["attempt"]
        trained, evaluated = d["images_trained"], d["images_evaluated"]
        if self.val_images is not None and evaluated != self.val_images:
            self.validation.add(line, f"trial {trial} epoch {epoch} evaluated {evaluated} images, "
                                      f"the validation set has {self.val_images}")
        if self.images_cap is not None and trained > self.images_cap:
            self.images.add(line, f"trial {trial} epoch {epoch} trained {trained} images, the training "
                                  f"set has {self.train_images}")
        # The epoch's FLOP rate against its slot's peak, asked once per device count (this runs per epoch).
        if self.flops_for is None or self.slot_peak is None:
            return
        f = self.flops_for(trial)
        if f is None:
            return
        devices = attempt.devices if attempt is not None else 1
        peaks = self._slot_peaks
        peak = peaks[devices] if devices in peaks else peaks.setdefault(devices, self.slot_peak(devices))
        if not peak:
            return
        self._rate(trial, epoch, f[0] * trained + f[1] * evaluated, started, ended, peak, line)

    def _rate(self, trial: str, epoch: int, work: float, started: float, ended: float, peak: float,
              line: int) -> None:
        """The epoch's FLOP rate against its slot's peak."""
        seconds = ended - started
        rate = work / seconds if seconds > 0 else (math.inf if work > 0 else 0.0)
        ratio = rate / peak
        if self.max_epoch_ratio is None or ratio > self.max_epoch_ratio:
            self.max_epoch_ratio = ratio
            self.max_epoch_rate = rate
        if ratio > self.th["max_epoch_to_peak"]:
            self.epoch_rate.add(line, f"trial {trial} epoch {epoch}: {_fmt(rate)} FLOP/s on a slot whose "
                                      f"peak is {_fmt(peak)} FLOP/s")
