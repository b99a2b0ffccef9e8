"""The verification's fold of a scanned chunk: plain epochs a chunk at a time, the rest as before.

`verify()` folds every line of the main log into one `Replay` and the listeners it gives it
(spec/scoring.py `ScoreAccumulator`, spec/logaudit.py `LogAudit`, spec/fingerprint.py,
spec/hardware.py `SeenAccelerators`, spec/witness.py `WitnessAudit`, in that order). Line by line
that is a dict, a schema check and five listener calls per epoch, most of the time of a large log.
`Fold.take` gives the same result for the chunks spec/logchunks.py scans (`epochscan.Chunk`: plain
epochs as columns, every other line as its dict), in three steps:

1. Plan (`epochplan.plan`, nothing changed yet): the chunk's plain epochs grouped by trial; a
   trial's epochs are *free* when the ordinary path would take each of them in silence and
   nothing else in the chunk reads what they change: its attempt runs throughout, its epochs
   follow on from the last one, its times from the earlier ones', its rate stays under its
   slot's peak, no other line of the trial comes after its first epoch here, ... Every other
   line, and every epoch of a trial that is not free, is *held*.
2. The held lines, in order, the ordinary way (`feed_event`); the few things they share with the
   free epochs (the table of epoch work, the fingerprint sample, the fastest epoch, the FLOPs of
   a trial first seen here, the line after a heartbeat) are noted as they go.
3. The free epochs applied at once (`_apply`): per trial, its last epoch, best accuracy, end; the
   table and the sample merged with the held lines' entries in line order; maxima and minima.

A chunk whose lines are out of time order, that resumes the run or loses a slot, or comes before
the fingerprint sample's first epochs are through, is folded line by line. The fast path is taken
only with exactly those listeners (`Fold.fast`); tests/verify/test_fastfold.py checks that reports
agree with the line-by-line fold on varied and damaged logs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import schema
from .epochplan import Plan, plan
from .epochscan import INT_FIELDS, Chunk, EpochLimits
from .fingerprint import FIRST, MOST, RECORD, EpochFingerprints, record_digest
from .hardware import SeenAccelerators
from .logaudit import LogAudit
from .scoring import ScoreAccumulator
from .witness import WitnessAudit

PeekFlops = Callable[[str], "tuple[float, float] | None"]
"""A trial's (train, eval) FLOP/image as `ScoreAccumulator.flops_for` gives them, without its side effects."""


def feed_event(audit: LogAudit, data: Mapping[str, Any], line: int) -> None:
    """One line the ordinary way: the hot path for a well-formed epoch, `LogAudit.feed` for the rest."""
    if data["type"] == "epoch_end" and schema.valid_epoch_end(data):
        audit.epoch_checked(data, line)
    else:
        audit.feed(data, line)


class Fold:
    """Folds the verification's log into `audit`'s replay and its listeners; `line`: the line being
    folded, then the last one folded."""

    def __init__(self, audit: LogAudit, acc: ScoreAccumulator, fingerprints: EpochFingerprints,
                 seen: SeenAccelerators, witness: WitnessAudit, peek_flops: PeekFlops | None = None) -> None:
        self.audit, self.acc, self.fingerprints, self.witness = audit, acc, fingerprints, witness
        self.replay = replay = audit.replay
        self.peek_flops = peek_flops
        self.line = 0
        self.free_epochs = 0  # epochs folded a chunk at a time (for tests and benchmarks)
        # The code here stands for exactly these listeners, in this order (and no others).
        expected = [acc.on_epoch, audit.on_epoch, fingerprints.on_epoch, seen.on_epoch, witness.on_epoch]
        self.fast = (replay._on_epoch == expected and not replay.keep_epochs and acc.replay is replay
                     and witness.replay is replay and audit.flops_for == acc.trial_flops
                     and audit.slot_peak is not None)

    @property
    def limits(self) -> EpochLimits:
        """The per-epoch checks a scanning worker makes for this audit."""
        a = self.audit
        return EpochLimits(a.skew, a.val_images, a.images_cap)

    def take(self, item: Chunk | tuple[int, Mapping[str, Any]]) -> None:
        """A scanned chunk, or one line (line number, event) read the ordinary way."""
        if isinstance(item, Chunk):
            c: Chunk | None = self._head(item) if self.fast else item
            p = plan(c, self) if self.fast and c is not None else None
            if p is None:
                if c is not None:
                    self._lines(c)
            else:
                assert c is not None
                self._held(c, p)
                self._apply(c, p)
        else:
            self.line = item[0]
            feed_event(self.audit, item[1], item[0])

    def _head(self, c: Chunk) -> Chunk | None:
        """Fold the log's first lines one by one, up to where a plan can start (after line 2 and the
        fingerprint sample's first epochs); the rest of the chunk, if any."""
        fp, replay = self.fingerprints, self.replay
        if c.first_line > 2 and fp._counted >= FIRST and replay.first_t is not None:
            return c
        events = c.events()
        for k, (off, data) in enumerate(events):
            if self.line >= 2 and fp._counted >= FIRST and replay.first_t is not None:
                return c.tail(k)
            self.line = c.first_line + off
            feed_event(self.audit, data, self.line)
        return None

    def _lines(self, c: Chunk) -> None:
        for off, data in c.events():
            self.line = c.first_line + off
            feed_event(self.audit, data, self.line)

    # ---- step 2: the held lines, in order ---------------------------------------------------------------
    def _held(self, c: Chunk, p: Plan) -> None:
        audit, acc, replay, w, fp = self.audit, self.acc, self.replay, self.witness, self.fingerprints
        table, digests = acc.table.ended_at, fp.digests
        base, free, valid = c.first_line, p.free_line, p.valid
        held = sorted(list(zip(c.rec_offsets, c.recs, strict=True))
                      + list(zip(p.held_row_offsets, p.held_row_dicts, strict=True)), key=lambda x: x[0])
        firsts, fi = p.first_seen, 0
        if w._pending is not None and free[0]:  # a heartbeat ended the last chunk: its hash is this line's prev
            w._next_line({"seq": base - 1, "prev": c.first_prev})
        for off, data in held:
            while fi < len(firsts) and firsts[fi][0] < off:
                self._first_flops(base, *firsts[fi])
                fi += 1
            self.line = base + off
            n_table, n_digests, ratio, events = len(table), len(digests), audit.max_epoch_ratio, replay.events
            if off in valid:  # checked by the plan: not again
                audit.feed_valid(data, self.line)
            else:
                feed_event(audit, data, self.line)
            if len(table) != n_table:
                p.held_table.append(off)
            if len(digests) != n_digests:
                p.held_digests.append(off)
            if audit.max_epoch_ratio is not ratio:
                p.held_ratio = off
            if replay.events != events:
                p.last_applied = off
            if w._pending is not None and off + 1 < c.lines and free[off + 1]:
                w._next_line({"seq": base + off, "prev": c.digests[64 * off:64 * off + 64]})
        for first in firsts[fi:]:
            self._first_flops(base, *first)
        self.line = base + c.lines - 1

    def _first_flops(self, base: int, off: int, trial: str, peeked: Any) -> None:
        """A free trial first seen in this chunk: its FLOPs asked for where its first epoch is (as
        ScoreAccumulator.on_epoch asks), so that a graph's problem is reported at that line, in order."""
        flops = self.acc._flops
        if trial in flops:
            return
        self.line = base + off
        got = flops[trial] = self.acc.flops_for(trial)
        if got != peeked:
            raise RuntimeError(f"FLOPs of trial {trial}: {got} where {peeked} was expected")

    # ---- step 3: the free epochs at once ------------------------------------------------------------
    def _apply(self, c: Chunk, p: Plan) -> None:
        audit, acc, replay, w, fp = self.audit, self.acc, self.replay, self.witness, self.fingerprints
        r, sel = c.rows, p.free_rows  # sel: indices of the free rows, in line order
        n = len(sel)
        if not n:
            return
        self.free_epochs += n
        base = c.first_line
        if n == len(r.offset):  # every row: the columns as they are
            off, t, ended, accuracy = r.offset, r.t, r.ended_at, r.val_accuracy
        else:
            off, t, ended, accuracy = r.offset[sel], r.t[sel], r.ended_at[sel], r.val_accuracy[sel]
        audit.events += n
        t_max = float(t.max())
        if audit._last_t is None or t_max > audit._last_t:
            audit._last_t = t_max
        replay.events += n
        replay.epoch_lines += n
        last_off = int(off[-1])
        if last_off > p.last_applied:
            replay.last_t = float(t[-1])
        # per trial: what its last epoch leaves
        trials, last_ended, last_attempt = replay.trials, audit._last_ended, audit._last_attempt
        for name, epoch, count, last_acc, evaluated, best, t_last, end, off_last, f, attempt in p.free_groups:
            tr = trials[name]
            tr.last_epoch = epoch
            tr.epochs_counted += count
            tr.last_accuracy, tr.last_evaluated = last_acc, evaluated
            if tr.epoch_best is None or best > tr.epoch_best:
                tr.epoch_best = best
            if off_last > p.last_end.get(name, -1):
                tr.ended_t = t_last
            last_ended[name] = end  # never below the one before (planned)
            last_attempt[name] = attempt
            if f is None:
                acc.uncounted_epochs += count
        top = float(accuracy.max())
        if replay.best_epoch_accuracy is None or top > replay.best_epoch_accuracy:
            replay.best_epoch_accuracy = top
        self._table(p, off, ended, accuracy)
        fp._counted += n
        if p.digests_at_start < MOST:
            self._digests(c, p)
        if p.top_ratio is not None:
            ratio, rate, at = p.top_ratio
            current = audit.max_epoch_ratio
            if (current is None or ratio > current
                    or (ratio == current and p.held_ratio is not None and at < p.held_ratio)):
                audit.max_epoch_ratio, audit.max_epoch_rate = ratio, rate
        # WitnessAudit.on_epoch: the last epoch line and end, the earliest end after each heartbeat
        seq = base - 1 + last_off
        if seq > w.last_epoch_seq:
            w.last_epoch_seq = seq
        latest = float(ended.max())
        if w.last_epoch_end is None or not w.last_epoch_end > latest:
            w.last_epoch_end = latest
        window = w._window_min_end
        for heartbeat, earliest in p.windows(off, ended):
            current = window.get(heartbeat)
            window[heartbeat] = earliest if current is None else min(current, earliest)

    def _table(self, p: Plan, off: Any, ended: Any, accuracy: Any) -> None:
        """The free epochs' entries in the score's table, merged with the held lines' in line order."""
        acc = self.acc
        counted = p.work_counted  # free rows whose trial's FLOPs are known
        table, L0 = acc.table, p.table_at_start
        held = np.asarray(p.held_table, dtype=np.int64)
        if not counted.any() and not len(held):
            return
        every = bool(counted.all())
        pick = (lambda x: x) if every else (lambda x: x[counted])
        order = np.argsort(np.concatenate([held, pick(off)]), kind="stable") if len(held) else None
        cols = []
        for column, free_values in ((table.ended_at, pick(ended)), (table.work, pick(p.work)),
                                    (table.accuracy, pick(accuracy))):
            if order is None:  # no held line added to the table: the free rows' entries follow on
                cols.append((column, free_values))
                continue
            held_values = np.frombuffer(column[L0:], dtype=np.float64)
            cols.append((column, np.concatenate([held_values, free_values])[order]))
        for column, merged in cols:
            del column[L0:]
            column.frombytes(np.ascontiguousarray(merged, dtype=np.float64).tobytes())
        # the running total, summed in line order as the ordinary path sums it
        acc.work = float(np.cumsum(np.concatenate([[p.work_at_start], cols[1][1]]))[-1])

    def _digests(self, c: Chunk, p: Plan) -> None:
        """The fingerprint sample: the free epochs' candidates merged with the held lines' in line
        order, as many as the sample still takes."""
        fp, r = self.fingerprints, c.rows
        room = MOST - p.digests_at_start
        held = list(zip(p.held_digests, fp.digests[p.digests_at_start:], strict=True))
        free = []
        for i in p.candidates.tolist():
            name = c.trials[int(r.trial[i])]
            ev = {k: (int if k in INT_FIELDS else float)(getattr(r, k)[i]) for k in RECORD}
            free.append((int(r.offset[i]), record_digest(ev, self.replay.trials[name].arch_hash)))
        merged = [d for _, d in sorted(held + free)][:room]
        del fp.digests[p.digests_at_start:]
        fp.digests.extend(merged)
