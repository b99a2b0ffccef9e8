"""The parallel log reader (spec/logchunks.py) reads every log exactly as `eventlog.iter_events` does:
the same events, and the same LogError (line and reason) at the same first bad line, whatever
chunk a bad line falls in; and `verify()` reports the same through either reader.

Chunks of a few hundred bytes put every kind of damage mid-chunk, at a chunk's first line and in
the last chunk. About 5 s (a worker pool per case).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from aiperf_runner.spec import logchunks
from aiperf_runner.spec.eventlog import GENESIS, LogError, iter_events
from aiperf_runner.spec.logchunks import iter_records
from aiperf_runner.spec.verify import verify

from devdata.runfactory import make_run

PREV = re.compile(rb'"prev":"[0-9a-f]{64}"')


def rechain(lines: list[bytes]) -> list[bytes]:
    """The lines with every `prev` set to the digest of the line before (a forger's rewrite)."""
    out, prev = [], GENESIS
    for line in lines:
        line = PREV.sub(b'"prev":"' + prev.encode() + b'"', line)
        out.append(line)
        prev = hashlib.sha256(line).hexdigest()
    return out


def replace_at(i: int, old: bytes, new: bytes) -> Callable[[list[bytes]], list[bytes]]:
    """Replace `old` in the first line from the i-th on that holds it."""
    def edit(lines: list[bytes]) -> list[bytes]:
        j = next(j for j in range(i, len(lines)) if old in lines[j])
        lines[j] = lines[j].replace(old, new, 1)
        return lines
    return edit


def drop(i: int) -> Callable[[list[bytes]], list[bytes]]:
    return lambda lines: lines[:i] + lines[i + 1:]


def put(i: int, line: bytes) -> Callable[[list[bytes]], list[bytes]]:
    return lambda lines: lines[:i] + [line] + lines[i:]


# name -> (edit of the lines, rechain after it)
DAMAGE: dict[str, tuple[Callable[[list[bytes]], list[bytes]], bool]] = {
    "intact": (lambda lines: lines, False),
    "edited": (replace_at(20, b'"type":"epoch_end"', b'"type":"epoch_end","x":1'), False),
    "dropped": (drop(30), False),
    "dropped-rechained": (drop(30), True),
    "garbage": (put(25, b'{"seq":'), False),
    "empty-line": (put(25, b""), True),
    "array": (put(25, b"[1,2]"), True),
    "no-type": (replace_at(40, b'"type":"epoch_end",', b""), True),
    "t-int": (lambda lines: [PREV.sub(b'"prev":"x"', b'{"prev":"x","seq":%d,"t":5,"type":"heartbeat"}' % i)
                             if i == 33 else line for i, line in enumerate(lines)], True),
    "t-string": (replace_at(33, b'"t":', b'"t":"a","u":'), True),
    "nan": (replace_at(41, b'"val_loss":', b'"val_loss":NaN,"w":'), True),
    "bigint": (replace_at(42, b'"images_trained":', b'"images_trained":123456789012345678901234567890,"v":'), True),
    "not-utf8": (replace_at(43, b'"trial":"', b'"trial":"\xff'), True),
    "truncated": (lambda lines: lines[:-1] + [lines[-1][:-5]], False),
}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("chunks") / "run", slots=2, trials=6, epochs=6, retry_trials={2}).path


def outcome(events: object) -> tuple[list[str], tuple[int, str] | None]:
    out: list[str] = []
    try:
        for e in events:  # type: ignore[attr-defined]
            out.append(repr((e[0], e[1])))  # repr: NaN != NaN
    except LogError as exc:
        return out, (exc.line, exc.reason)
    return out, None


@pytest.mark.parametrize("name", list(DAMAGE))
def test_same_events_and_errors(name: str, base: Path, tmp_path: Path) -> None:
    edit, again = DAMAGE[name]
    raw = (base / "events.jsonl").read_bytes()
    lines = edit(raw.split(b"\n")[:-1])
    if again:
        lines = rechain(lines)
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"\n".join(lines) + (b"" if name == "truncated" else b"\n"))
    for tail in ((False, True) if name == "truncated" else (False,)):
        expected = outcome(iter_events(log, allow_partial_tail=tail))
        got = outcome(iter_records(log, workers=2, chunk=700, min_parallel=0, allow_partial_tail=tail))
        assert got == expected
        assert name in ("intact", "t-int", "nan", "bigint") or tail or expected[1] is not None


def test_verify_reports_alike(base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    shutil.copytree(base, run)
    sequential = verify(run, workers=1)
    monkeypatch.setattr(logchunks, "MIN_PARALLEL", 0)
    monkeypatch.setattr(logchunks, "CHUNK", 1000)
    parallel = verify(run, workers=2)
    assert json.dumps(parallel, sort_keys=True) == json.dumps(sequential, sort_keys=True)
    assert parallel["integrity_ok"] and parallel["epochs"] > 0


def test_an_intact_log_is_read_by_the_workers(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No chunk of an intact log is read again here: the workers' results are used as they are."""
    again: list[int] = []
    sequential = logchunks._sequential

    def spy(path: Path, start: int, end: int, number: int, prev: str):  # type: ignore[no-untyped-def]
        again.append(start)
        return (yield from sequential(path, start, end, number, prev))

    monkeypatch.setattr(logchunks, "_sequential", spy)
    got = list(iter_records(base / "events.jsonl", workers=2, chunk=700, min_parallel=0))
    assert [line for line, _ in got] == list(range(1, len(got) + 1)) and len(got) > 20
    assert again == []
