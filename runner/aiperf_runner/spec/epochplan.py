"""Step 1 of spec/fastfold.py: which of a scanned chunk's plain epochs can be folded at once.

`plan(chunk, fold)` changes nothing the verification reports (it fills two caches of pure
functions: the slot peaks by device count, a trial's FLOPs). It returns None when the chunk must be
folded line by line, else a `Plan`: the chunk's plain epochs grouped by trial, each group *free*
or *held*. A group is free when the ordinary path (spec/replay.py `Replay.epoch` and its listeners)
would take each of its epochs in silence, whatever order they are folded in relative to the
chunk's other lines:

- the trial was proposed before its first epoch here, once; the epochs are of one attempt, which
  runs from before the first to after the last (started before, not ended, its slot not taken);
- its epoch numbers follow on from the trial's last one (so every epoch counts, none is a gap);
  its `ended_at` never goes back, `started_at` is not before the attempt started (the clock-skew
  tolerance) nor before the epoch before it ended (the trial's last end, whatever its attempt: a
  new attempt's clock may be skewed, and is then folded line by line), and no other line of the trial's (an epoch the ordinary path reads, a proposal)
  comes after its first epoch here;
- each epoch's FLOP rate stays within the rules' bound of its slot's peak;
- no accuracy or end time is zero (a signed zero would make the order of equal maxima visible).

Whatever a free group changes that other lines read is merged in line order by spec/fastfold.py.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from . import schema
from .epochscan import Chunk
from .fingerprint import EVERY, FIRST, MOST
from .replay import TERMINAL
from .scoring import V1_EVAL_IMAGES, V1_TRAIN_IMAGES

if TYPE_CHECKING:
    from .fastfold import Fold

STOPS = frozenset({"run_started", "run_resumed", "slot_lost"})
"""Lines that change what every running attempt is: a chunk holding one is folded line by line."""


@dataclass
class Plan:
    free_line: Any  # bool per line of the chunk: a free epoch
    free_rows: Any  # the free epochs' row indices, in line order
    free_groups: list[tuple[Any, ...]]  # per free trial: see `plan`
    held_row_offsets: list[int]
    held_row_dicts: list[dict[str, Any]]
    first_seen: list[tuple[int, str, Any]]  # (offset of its first epoch, trial, FLOPs) of free trials new here
    last_end: dict[str, int]  # trial -> offset of its last end line here
    work: Any  # per free row: the work it adds to the score (where its trial's FLOPs are known)
    work_counted: Any  # per free row: its trial's FLOPs are known
    top_ratio: tuple[float, float, int] | None  # the free rows' first highest rate to peak: (ratio, rate, offset)
    candidates: Any  # free rows whose end time puts them in the fingerprint sample
    heartbeats: list[tuple[int, int]]  # (offset, seq) of the chunk's heartbeat lines
    heartbeat_at_start: int | None
    valid: set[int]  # offsets of the lines (not epochs) found well-formed
    table_at_start: int
    work_at_start: float
    digests_at_start: int
    held_table: list[int] = field(default_factory=list)  # offsets of the held lines that added to the table
    held_digests: list[int] = field(default_factory=list)  # ... and to the fingerprint sample
    held_ratio: int | None = None  # offset of the held line that last raised the highest rate to peak
    last_applied: int = -1  # offset of the last held line the replay applied

    def windows(self, off: Any, ended: Any) -> list[tuple[int, float]]:
        """(heartbeat seq, earliest end) of the free epochs after each heartbeat (WitnessAudit's window)."""
        hb_offsets = np.asarray([o for o, _ in self.heartbeats], dtype=np.int64)
        segment = np.searchsorted(hb_offsets, off, side="right")  # 0: before the chunk's first heartbeat
        cuts = np.flatnonzero(np.r_[True, segment[1:] != segment[:-1]])
        earliest = np.minimum.reduceat(ended, cuts).tolist()
        out = []
        for s, e in zip(segment[cuts].tolist(), earliest, strict=True):
            heartbeat = self.heartbeats[s - 1][1] if s else self.heartbeat_at_start
            if heartbeat is not None:
                out.append((heartbeat, e))
        return out


@dataclass
class _Lines:
    """What the chunk's other lines do that a group's epochs depend on (read, never applied)."""

    starts: dict[tuple[str, int], tuple[int, float, int, int]] = field(default_factory=dict)  # (off, t, devices, slot)
    twice: set[tuple[str, int]] = field(default_factory=set)
    slot_starts: dict[int, list[int]] = field(default_factory=dict)
    ends: dict[tuple[str, int], int] = field(default_factory=dict)  # first end line of an attempt
    last_end: dict[str, int] = field(default_factory=dict)
    proposed: dict[str, int] = field(default_factory=dict)
    reproposed: set[str] = field(default_factory=set)
    epochs: dict[str, list[tuple[int, Any, Any]]] = field(default_factory=dict)  # (off, epoch, ended) if valid
    heartbeats: list[tuple[int, int]] = field(default_factory=list)
    valid: set[int] = field(default_factory=set)  # offsets of the lines of other types found well-formed
    touched: set[str] = field(default_factory=set)  # trials these lines name (proposed, started, ended, epochs)


def _lines(c: Chunk, trials: Any) -> _Lines | None:
    out = _Lines()
    valid, valid_epoch, main = schema.valid, schema.valid_epoch_end, schema.types(schema.MAIN)
    for off, d in zip(c.rec_offsets, c.recs, strict=True):
        kind = d["type"]
        if type(kind) is not str:  # a schema finding: the replay never sees it
            continue
        if kind in STOPS:
            return None
        if kind == "epoch_end":
            tid = d.get("trial")
            if type(tid) is str:
                ok = valid_epoch(d)
                out.epochs.setdefault(tid, []).append((off, d["epoch"] if ok else None, d["ended_at"] if ok else None))
            continue
        if kind not in main or not valid(d):  # a schema finding: the replay never sees it
            continue
        out.valid.add(off)
        if kind == "trial_started":
            key, slot = (d["trial"], d["attempt"]), d["slot"]
            if key in out.starts:
                out.twice.add(key)
            else:
                out.starts[key] = (off, float(d["t"]), int(d.get("devices") or 1), slot)
            out.slot_starts.setdefault(slot, []).append(off)
        elif kind in TERMINAL:
            out.ends.setdefault((d["trial"], d["attempt"]), off)
            out.last_end[d["trial"]] = off
        elif kind == "trial_proposed":
            tid = d["trial"]
            if tid in out.proposed or tid in trials:
                out.reproposed.add(tid)
            out.proposed.setdefault(tid, off)
        elif kind == "heartbeat":
            out.heartbeats.append((off, d["seq"]))
    out.touched = set(out.proposed) | out.reproposed | set(out.epochs) | {t for t, _ in out.starts} | {
        t for t, _ in out.ends} | {t for t, _ in out.twice}
    return out


def plan(c: Chunk, fold: Fold) -> Plan | None:
    """What of the chunk can be folded at once (see the module docstring); None: line by line."""
    audit, replay, fp = fold.audit, fold.replay, fold.fingerprints
    r = c.rows
    n = len(r.offset)
    if not n or c.first_line <= 2 or replay.first_t is None or fp._counted < FIRST:
        return None
    # Every line's time a float, none zero, none before the one before (so no timestamp finding).
    times = np.empty(c.lines)
    times[r.offset] = r.t
    if c.recs:
        rec_t = [d["t"] for d in c.recs]
        if any(type(x) is not float for x in rec_t):
            return None
        times[c.rec_offsets] = rec_t
    last_t = audit._last_t
    if (last_t is not None and times[0] < last_t) or (times[1:] < times[:-1]).any() or not times.all():
        return None
    lines = _lines(c, replay.trials)
    if lines is None:
        return None
    # Group the rows by trial: `order` lists each group's rows in line order, from `starts`;
    # `group` is each row's group (rows in line order, as everywhere else here).
    order = np.argsort(r.trial, kind="stable")
    by_trial = r.trial[order]
    starts = np.flatnonzero(np.r_[True, by_trial[1:] != by_trial[:-1]])
    counts = np.diff(np.r_[starts, n])
    size = len(starts)
    group = np.empty(n, dtype=np.int64)
    group[order] = np.repeat(np.arange(size), counts)
    first, last = order[starts], order[starts + counts - 1]
    attempts = r.attempt[order]
    one_attempt = np.maximum.reduceat(attempts, starts) == np.minimum.reduceat(attempts, starts)
    names = [c.trials[k] for k in by_trial[starts].tolist()]
    ok_list, last_epoch, last_end, started, peak = (np.asarray(x) for x in _groups(
        fold, lines, names, r.attempt[first].tolist(), r.offset[first].tolist(), r.offset[last].tolist(),
        one_attempt.tolist()))
    ok = ok_list.astype(bool)
    # In trial order: each epoch the next one, its end not before the one before, its start not before that end.
    epoch, ended = r.epoch[order], r.ended_at[order]
    step = np.empty(n, dtype=bool)
    started_in_order = r.started_at[order]
    step[1:] = (epoch[1:] == epoch[:-1] + 1) & (ended[1:] >= ended[:-1]) & ~(started_in_order[1:] < ended[:-1])
    step[starts] = ((epoch[starts] == last_epoch + 1) & ~(ended[starts] < last_end)
                    & ~(started_in_order[starts] < last_end))
    ok &= np.logical_and.reduceat(step, starts)
    # In line order: started after its attempt, nothing zero; a group with a bad row is held.
    bad = (r.started_at < started[group] - audit.skew) | (r.val_accuracy == 0) | (r.ended_at == 0)
    if len(fp.digests) < MOST:
        bad |= ~(np.abs(r.ended_at) < 4e12)  # int(ended_at x 1e6) below stays exact
    ok &= np.bincount(group[bad], minlength=size) == 0
    flops, known, first_seen = _flops(fold, names, ok, r.offset[first])
    # The rate to peak of each epoch (LogAudit._rate's arithmetic, in the same order).
    with np.errstate(divide="ignore", invalid="ignore"):
        rate_work = flops[group, 0] * r.images_trained + flops[group, 1] * r.images_evaluated
        seconds = r.ended_at - r.started_at
        rate = np.where(seconds > 0, rate_work / seconds, np.where(rate_work > 0, np.inf, 0.0))
        rated = (known & (peak != 0))[group]
        ratio = np.where(rated, rate / np.where(rated, peak[group], 1.0), -np.inf)
    ok &= np.bincount(group[rated & (ratio > audit.th["max_epoch_to_peak"])], minlength=size) == 0
    if not ok.any():
        return None
    return _plan(c, fold, lines, order, starts, counts, last, names, ok, group, flops, known, rate, ratio, rated,
                 rate_work, first_seen)


def _flops(fold: Fold, names: list[str], ok: Any,
           first_offsets: Any) -> tuple[Any, Any, list[tuple[int, str, Any, int]]]:
    """(train, eval) FLOP/image of each free group's trial (nan: unknown), whether known, and the
    trials first seen here (offset of the first epoch, trial, FLOPs, group): asked for now, the value the
    ordinary path will get there. A trial whose FLOPs cannot be asked for is held (`ok` cleared)."""
    acc, peek = fold.acc, fold.peek_flops
    flops = np.full((len(names), 2), np.nan)
    known = np.zeros(len(names), dtype=bool)
    first_seen: list[tuple[int, str, Any, int]] = []
    have = acc._flops
    for g in np.flatnonzero(ok).tolist():
        name = names[g]
        if name in have:
            f = have[name]
        elif peek is not None:
            f = peek(name)
            first_seen.append((int(first_offsets[g]), name, f, g))
        else:
            ok[g] = False
            continue
        if f is not None:
            flops[g] = f
            known[g] = True
    return flops, known, first_seen


def _plan(c: Chunk, fold: Fold, lines: _Lines, order: Any, starts: Any, counts: Any, last: Any, names: list[str],
          ok: Any, group: Any, flops: Any, known: Any, rate: Any, ratio: Any, rated: Any, rate_work: Any,
          first_seen: list[tuple[int, str, Any, int]]) -> Plan:
    """The plan, from the free groups (`ok`)."""
    acc, fp, r = fold.acc, fold.fingerprints, c.rows
    free = ok[group]
    every = bool(free.all())
    free_rows = np.arange(len(free)) if every else np.flatnonzero(free)
    held_rows = np.flatnonzero(~free)
    free_line = np.zeros(c.lines, dtype=bool)
    free_line[r.offset[free_rows]] = True

    def of_free(column: Any) -> Any:
        return column if every else column[free_rows]

    # per free trial, what its last epoch here leaves: (trial, epoch, epochs, accuracy, images
    # evaluated, best accuracy, t, ended_at, offset, FLOPs or None, attempt)
    g_free = np.flatnonzero(ok)
    at = last[g_free]
    best = np.maximum.reduceat(r.val_accuracy[order], starts)[g_free]  # no zero: equal maxima are alike
    groups = list(zip([names[g] for g in g_free.tolist()], r.epoch[at].tolist(), counts[g_free].tolist(),
                      r.val_accuracy[at].tolist(), r.images_evaluated[at].tolist(), best.tolist(), r.t[at].tolist(),
                      r.ended_at[at].tolist(), r.offset[at].tolist(),
                      [tuple(f) if k else None for f, k in zip(flops[g_free].tolist(), known[g_free].tolist(),
                                                               strict=True)], r.attempt[at].tolist(), strict=True))
    if acc._v1:
        work = of_free(flops[group, 0] * V1_TRAIN_IMAGES + flops[group, 1] * V1_EVAL_IMAGES)
    else:
        work = of_free(rate_work)  # the same products, in the same order, as ScoreAccumulator's
    top = None
    free_rated = of_free(rated)
    if free_rated.any():
        free_ratio = of_free(ratio)
        i = int(np.argmax(free_ratio))  # the first of the highest, in line order
        top = (float(free_ratio[i]), float(of_free(rate)[i]), int(r.offset[free_rows[i]]))
    candidates = np.zeros(0, dtype=np.int64)
    if len(fp.digests) < MOST:
        candidates = free_rows[np.trunc(of_free(r.ended_at) * 1e6).astype(np.int64) % EVERY == 0]
    return Plan(free_line, free_rows, groups, r.offset[held_rows].tolist(), c.row_dicts(held_rows) if len(held_rows)
                else [], sorted(x[:3] for x in first_seen if ok[x[3]]), lines.last_end, work, of_free(known[group]), top, candidates,
                lines.heartbeats, fold.witness._last_heartbeat, lines.valid, len(acc.table), acc.work,
                len(fp.digests))


def _groups(fold: Fold, lines: _Lines, names: list[str], attempts: list[int], first_off: list[int],
            last_off: list[int], one_attempt: list[bool]) -> tuple[list[bool], list[int], list[float], list[float],
                                                                  list[float]]:
    """Per group: (free so far, the trial's last epoch, its last end (-inf: none), its attempt's
    start, its slot's peak (0: none)) as they will be when its first epoch here is folded."""
    replay, audit = fold.replay, fold.audit
    trials, unproposed, active, orphaned = replay.trials, replay.unproposed, replay._active, replay._orphaned
    peaks, slot_peak, ended_before = audit._slot_peaks, audit.slot_peak, audit._last_ended
    touched, slot_starts = lines.touched, lines.slot_starts
    oks: list[bool] = []
    epochs: list[int] = []
    ends: list[float] = []
    starts: list[float] = []
    slot_peaks: list[float] = []
    inf = -np.inf
    for name, a, fo, lo, one in zip(names, attempts, first_off, last_off, one_attempt, strict=True):
        key = (name, a)
        if name not in touched:  # the common case: no other line here names the trial
            state, attempt = trials.get(name), active.get(key)
            if state is None or attempt is None:
                ok, epoch, end_before, started, devices = False, 0, None, 0.0, 1
            else:
                slot = attempt.slot
                ok = one and not (slot in slot_starts and slot_starts[slot][0] < lo)
                epoch, end_before = state.last_epoch, ended_before.get(name)
                started, devices = attempt.started, attempt.devices
        else:
            ok, epoch, end_before, started, devices = _touched(lines, trials, unproposed, active, orphaned, ended_before,
                                                               name, key, fo, lo, one)
        if devices not in peaks and slot_peak is not None:
            peaks[devices] = slot_peak(devices)  # as LogAudit.on_epoch fills it (a pure function)
        oks.append(ok)
        epochs.append(epoch)
        ends.append(inf if end_before is None else end_before)
        starts.append(started)
        slot_peaks.append(peaks.get(devices) or 0.0)
    return oks, epochs, ends, starts, slot_peaks


def _touched(lines: _Lines, trials: Any, unproposed: Any, active: Any, orphaned: Any, ended_before: Any, name: str,
             key: tuple[str, int], fo: int, lo: int, one: bool) -> tuple[bool, int, Any, float, int]:
    """`_groups` for a trial other lines of the chunk name: (free so far, last epoch, last end or
    None, its attempt's start, its devices) with what those lines do before its first epoch here."""
    ok = one and name not in lines.reproposed
    if name in lines.proposed:
        ok = ok and lines.proposed[name] < fo
        state = unproposed.get(name)
    else:
        state = trials.get(name)
        ok = ok and state is not None
    start = lines.starts.get(key)
    attempt = active.get(key)
    if start is not None:
        ok = ok and attempt is None and key not in orphaned and key not in lines.twice and start[0] < fo
        start_off, started, devices, slot = start
    elif attempt is not None:
        start_off, started, devices, slot = -1, attempt.started, attempt.devices, attempt.slot
    else:
        return False, 0, None, 0.0, 1
    end = lines.ends.get(key)
    taken = lines.slot_starts.get(slot, [])
    i = bisect.bisect_right(taken, start_off)  # the first start on its slot after its own
    ok = ok and (end is None or end > lo) and not (i < len(taken) and taken[i] < lo)
    epoch = state.last_epoch if state is not None else 0
    end_before = ended_before.get(name)
    for off, e, en in lines.epochs.get(name, ()):
        if off > fo:  # a line of the trial's after its first epoch here
            ok = False
        elif e is not None:
            epoch = e if e > epoch else epoch
            end_before = en if end_before is None else max(en, end_before)
    return ok, epoch, end_before, started, devices
