"""Which running attempts have news, without looking at every trial's files ten times a second.

The controller asks its backend `wait_changed(timeout)` every loop (base.py) and reads the log of
each attempt named in the answer. The local, slurm and slurm-steps backends answer from a
`FileWatch`, which learns that an attempt's files changed in two ways:

- inotify (Linux, package inotify_simple): the kernel says so at once, for writes made on this
  machine: the local backend's trials, a step on the controller's own node. It says nothing of
  writes made on other nodes of a shared file system (NFS, Lustre and GPFS do not forward them).
- stat with back-off: a file is looked at again `min_s` after it changed and, each time it has not,
  twice as long after as the time before, up to `max_s`. On Lustre or GPFS each stat of a file
  another node is writing costs the servers a lock round trip; polling every trial's log 10 times a
  second was 600 of them per trial per minute. Now an attempt's epoch is seen at most `max_s` after
  it was written (a trial's epoch takes seconds to hours), at once when inotify sees it.

An attempt's end is learnt from `ended` (local and slurm-steps: the exit status of a child process,
no file system), at once when the backend gives `wake_fds` that become readable when one ends (the
local backend: the warm-start zygote's pipe, a pidfd per cold-started attempt), else at the next
wake-up; and an attempt is named at least every `every_s` when given (slurm: so that its handle
polls squeue's cached answer, which says why a job ended without writing its exit file).
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from aiperf_runner.backends.base import TrialHandle

try:  # Linux only; without it the back-off alone bounds the work
    import inotify_simple
except ImportError:  # pragma: no cover - every Linux install has it (runner/pyproject.toml)
    inotify_simple = None

MIN_CHECK_S = 0.1  # a file that just changed is looked at again this soon (the controller's old cadence)
MAX_CHECK_S = 2.0  # and one that has not changed for a while at least this often
SAFETY_CHECK_S = 10.0  # the same when inotify sees every write (they are all made on this machine)
# A stat of a file never seen differs from every real one: the first look reports what is there.
_UNSEEN = (-1, -1)

Signature = tuple[int, int] | None  # (size, mtime in ns); None: no such file


@dataclass
class _Watched:
    handle: TrialHandle
    paths: tuple[Path, ...]
    sigs: list[Signature]
    interval: float
    due: float  # when its files are stat'ed next
    report_due: float  # when it is named anyway (every_s)
    max_s: float  # the longest wait between two looks
    dirs: set[str] = field(default_factory=set)


class FileWatch:
    """The attempts whose files changed or that ended; see the module docstring."""

    def __init__(self, ended: Callable[[TrialHandle], bool] | None = None, every_s: float | None = None,
                 min_s: float = MIN_CHECK_S, max_s: float = MAX_CHECK_S, use_inotify: bool = True,
                 writes_here: bool = False, wake_fds: Callable[[], list[int]] | None = None) -> None:
        """`writes_here`: every write to the watched files is made on this machine (the local
        backend), so inotify sees them all and the back-off is only a safety net (SAFETY_CHECK_S).
        `wake_fds`: file descriptors that become readable when an attempt ends; whoever gives them
        drains them in `ended`."""
        self.ended = ended
        self.wake_fds = wake_fds
        self.every_s = every_s
        self.min_s, self.max_s = min_s, max(min_s, max_s)
        self.stat_calls = 0  # stats made, for tests and bench/collect_io.py
        self._watched: dict[TrialHandle, _Watched] = {}
        self._by_name: dict[tuple[str, str], set[TrialHandle]] = {}  # (directory, file name) -> handles
        self._wd_of: dict[str, int] = {}  # directory -> inotify watch descriptor
        self._dir_of: dict[int, str] = {}
        self._inotify = None
        if use_inotify and inotify_simple is not None:
            try:
                self._inotify = inotify_simple.INotify(nonblocking=True)
            except OSError:  # no inotify (instances used up, a kernel without it): back-off only
                self._inotify = None
        # With every write seen by inotify, the back-off only covers a directory it could not watch.
        self._safety_s = max(self.max_s, SAFETY_CHECK_S) if self._inotify is not None and writes_here else None

    @property
    def inotify(self) -> bool:
        return self._inotify is not None

    def add(self, handle: TrialHandle, paths: Iterable[Path]) -> None:
        """Watch these files of an attempt (they need not exist yet; their directory must)."""
        now = time.monotonic()
        paths = tuple(Path(p) for p in paths)
        w = _Watched(handle, paths, [_UNSEEN] * len(paths), self.min_s, now + self.min_s,
                     now + (self.every_s or 0.0), self.max_s)
        self._watched[handle] = w
        for path in paths:
            folder = os.path.abspath(path.parent)
            self._by_name.setdefault((folder, path.name), set()).add(handle)
            w.dirs.add(folder)
            if self._inotify is not None and folder not in self._wd_of:
                try:
                    wd = self._inotify.add_watch(folder, _MASK)
                except OSError:  # out of watches (fs.inotify.max_user_watches): the back-off covers it
                    continue
                self._wd_of[folder] = wd
                self._dir_of[wd] = folder
        if self._safety_s is not None and all(folder in self._wd_of for folder in w.dirs):
            w.max_s = self._safety_s

    def discard(self, handle: TrialHandle) -> None:
        w = self._watched.pop(handle, None)
        if w is None:
            return
        for path in w.paths:
            key = (os.path.abspath(path.parent), path.name)
            users = self._by_name.get(key)
            if users is not None:
                users.discard(handle)
                if not users:
                    del self._by_name[key]
        for folder in w.dirs:
            if any(d == folder for d, _ in self._by_name):
                continue
            wd = self._wd_of.pop(folder, None)
            if wd is not None and self._inotify is not None:
                self._dir_of.pop(wd, None)
                with contextlib.suppress(OSError):  # the directory may be gone already
                    self._inotify.rm_watch(wd)

    def wait(self, timeout: float) -> set[TrialHandle]:
        """The attempts with news, as soon as there is any, or an empty set after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            news = self._ended() | self._inotify_news() | self._stat_due(now)
            if news or now >= deadline:
                return news
            wake = [deadline, *(w.due for w in self._watched.values())]
            if self.every_s is not None:
                wake += [w.report_due for w in self._watched.values()]
            nap = max(0.0, min(wake) - now)
            fds = [self._inotify.fileno()] if self._inotify is not None else []
            if self.wake_fds is not None:
                fds += self.wake_fds()
            if fds:
                select.select(fds, [], [], nap)
            else:
                time.sleep(nap)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None

    # ---- the three sources ----
    def _ended(self) -> set[TrialHandle]:
        if self.ended is None:
            return set()
        done = {h for h in self._watched if self.ended(h)}
        for handle in done:  # the controller reads its log once more after the end
            self.discard(handle)
        return done

    def _inotify_news(self) -> set[TrialHandle]:
        if self._inotify is None:
            return set()
        touched: set[TrialHandle] = set()
        for event in self._inotify.read(timeout=0):
            if event.mask & _OVERFLOW:  # the kernel dropped events: every file is looked at now
                for w in self._watched.values():
                    w.due = 0.0
                continue
            folder = self._dir_of.get(event.wd)
            if folder is not None:
                touched.update(self._by_name.get((folder, event.name), ()))
        # One write makes several events (modify, close): news when the stat shows a change, which
        # is then the signature the back-off compares with. The writer is on this machine, so
        # inotify will see its next write too: the back-off is not shortened.
        now = time.monotonic()
        return {h for h in touched if self._look(self._watched[h], now, by_inotify=True)}

    def _stat_due(self, now: float) -> set[TrialHandle]:
        news: set[TrialHandle] = set()
        for w in self._watched.values():
            if self.every_s is not None and now >= w.report_due:
                news.add(w.handle)
                w.report_due = now + self.every_s
            if now < w.due:
                continue
            if self._look(w, now):
                news.add(w.handle)
        return news

    def _look(self, w: _Watched, now: float, by_inotify: bool = False) -> bool:
        """Stat the attempt's files; True when one changed. The next look comes sooner after a
        change the back-off found, later after none."""
        changed = False
        for i, path in enumerate(w.paths):
            self.stat_calls += 1
            try:
                st = os.stat(path)
                sig: Signature = (st.st_size, st.st_mtime_ns)
            except OSError:
                sig = None
            if sig != w.sigs[i]:
                changed = changed or w.sigs[i] is not _UNSEEN or sig is not None
                w.sigs[i] = sig
        w.interval = self.min_s if changed and not by_inotify else min(w.max_s, w.interval * 2)
        w.due = now + w.interval
        return changed


def _inotify_flags() -> tuple[int, int]:
    """(what to watch a directory for, the queue-overflow bit)."""
    if inotify_simple is None:
        return 0, 0
    f = inotify_simple.flags
    return int(f.MODIFY | f.CLOSE_WRITE | f.CREATE | f.MOVED_TO), int(f.Q_OVERFLOW)


_MASK, _OVERFLOW = _inotify_flags()
