"""backends/filewatch.py: which attempts have news, with few looks at their files.

A file that does not change is stat'ed less and less often (down to once per `max_s`); a change is
seen within `max_s` by the back-off and at once by inotify; an attempt that ended is named (and no
longer watched); `every_s` names every attempt that often. And the local backend answers
`wait_changed` from it: a trial's log line is news at once, its exit too. ~10 s.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from aiperf_runner.backends.base import LaunchSpec, Slot, TrialHandle
from aiperf_runner.backends.filewatch import FileWatch, inotify_simple
from aiperf_runner.backends.local import LocalBackend

from tests.helpers import REPO


class Attempt(TrialHandle):
    """A handle whose end the test decides."""

    def __init__(self, trial_dir: Path) -> None:
        self.spec = LaunchSpec("t0000", 1, ("true",), trial_dir, trial_dir / "stdout.log", trial_dir / "stderr.log")
        self.slot = Slot(0)
        self.rc: int | None = None

    def poll(self) -> int | None:
        return self.rc

    def cancel(self) -> None:
        self.rc = -15


def collect(watch: FileWatch, seconds: float) -> list[tuple[float, set[TrialHandle]]]:
    """Every non-empty answer of `wait` for `seconds`, with when it came."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        news = watch.wait(min(0.1, max(0.0, end - time.monotonic())))
        if news:
            out.append((time.monotonic(), news))
    return out


def test_an_unchanged_file_is_looked_at_less_and_less_and_a_change_is_seen(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    log.write_text('{"type": "trial_started"}\n')
    watch = FileWatch(min_s=0.1, max_s=0.8, use_inotify=False)
    attempt = Attempt(tmp_path)
    watch.add(attempt, [log])
    first = collect(watch, 0.3)
    assert [news for _, news in first] == [{attempt}]  # what is there at the first look is news
    watch.stat_calls = 0
    assert collect(watch, 3.0) == []
    # 10 Hz polling would have made 30 stats; the back-off makes one per 0.2, 0.4, 0.8, 0.8... s.
    assert 3 <= watch.stat_calls <= 7, watch.stat_calls
    with log.open("a") as fh:
        fh.write('{"type": "epoch_end"}\n')
    written = time.monotonic()
    seen = collect(watch, 1.2)
    assert seen and seen[0][1] == {attempt}
    assert seen[0][0] - written <= 0.8 + 0.5  # the longest back-off, and a loaded machine's delay
    assert len(seen) == 1  # reported once, not again while it stays the same


@pytest.mark.skipif(inotify_simple is None or not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_inotify_reports_a_write_at_once_however_long_the_back_off(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    watch = FileWatch(min_s=5.0, max_s=30.0)  # no stat in the first 5 s: what is seen, inotify saw
    assert watch.inotify
    attempt = Attempt(tmp_path)
    watch.add(attempt, [log])
    assert collect(watch, 0.5) == []
    (tmp_path / "stdout.log").write_text("a trial's print is not news\n")
    assert collect(watch, 0.3) == []
    log.write_text('{"type": "epoch_end"}\n')
    written = time.monotonic()
    news = watch.wait(2.0)
    assert news == {attempt} and time.monotonic() - written < 1.0
    assert collect(watch, 0.5) == []  # the back-off does not report the same change again
    watch.close()


def test_an_ended_attempt_is_named_once_and_every_s_names_the_others(tmp_path: Path) -> None:
    a, b = Attempt(tmp_path / "a"), Attempt(tmp_path / "b")
    for h in (a, b):
        h.spec.trial_dir.mkdir()
    watch = FileWatch(ended=lambda h: h.poll() is not None, every_s=0.5, use_inotify=False)
    watch.add(a, [a.spec.trial_dir / "events.jsonl"])
    watch.add(b, [b.spec.trial_dir / "events.jsonl"])
    a.rc = 0
    assert watch.wait(0.0) == {a}
    seen = collect(watch, 1.2)
    assert [news for _, news in seen] == [{b}, {b}]  # every 0.5 s; `a` no longer
    watch.discard(b)
    assert collect(watch, 0.6) == []


def test_the_local_backend_tells_the_controller_of_a_line_and_of_the_end(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path, slots=1, device_type="cpu")
    trial_dir = tmp_path / "trials" / "t0000"
    trial_dir.mkdir(parents=True)
    script = "import sys, time; time.sleep(1.0); open(sys.argv[1], 'a').write('{}\\n'); time.sleep(1.0)"
    spec = LaunchSpec("t0000", 1, (sys.executable, "-c", script, str(trial_dir / "events.jsonl")), trial_dir,
                      trial_dir / "stdout.log", trial_dir / "stderr.log", env={"PYTHONPATH": str(REPO)})
    try:
        handle = backend.launch(spec, backend.slots()[0])
        log = trial_dir / "events.jsonl"
        seen = []  # (when, the line was there, exit status) at each answer with news
        deadline = time.monotonic() + 10
        while not seen or seen[-1][2] is None:
            news = backend.wait_changed(0.1)
            assert news is not None and time.monotonic() < deadline
            if news:
                seen.append((time.monotonic(), log.exists() and log.read_text() == "{}\n", handle.poll()))
        line_at = next(t for t, has_line, rc in seen if has_line)
        end_at, _, rc = seen[-1]
        assert rc == 0 and len(seen) <= 4  # the file's creation, its line, the end: not every 0.1 s
        assert 0.7 < end_at - line_at < 1.6  # the line, then the exit a second later: each when it happened
    finally:
        backend.shutdown()
