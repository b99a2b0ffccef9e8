"""Every per-epoch check of the audit finds the same in both folds of verification.

spec/logaudit.py `LogAudit.on_epoch` makes the checks of an epoch line by line. The chunked fold
makes them again, vectorised, to tell which epochs it may fold at once, without `on_epoch`: the
stateless ones in spec/epochscan.py `_rows` (`EpochLimits`: ends before it starts, ends after its
line, images evaluated, images trained), those that need the trial's state in spec/epochplan.py
`plan` (starts before its attempt, ends before the previous epoch, starts before the previous
epoch of its attempt ended, rate over the slot's peak). A
vectorised copy that missed a case would fold a failing epoch in silence. So for each check, epoch
lines that fail it are written into a generated log, and the findings of the two folds must be
equal, and not empty. `CHECKS` must name every finding `on_epoch` makes (`test_every_check_is_here`).
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.spec import fastfold, logchunks, rules
from aiperf_runner.spec import verify as verify_module
from aiperf_runner.spec.logaudit import Findings, LogAudit

from devdata.runfactory import DEFAULT_DATASET, make_run
from tests.verify.test_fastfold import epochs_at, rechain

TH = rules.thresholds()
IMAGES_CAP = DEFAULT_DATASET["train_images"] * (1 + TH["epoch_images_slack"]) + TH["epoch_images_pad"]

# check -> (the audit's findings it adds to, how an epoch line is made to fail it)
CHECKS: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "ends-before-start": ("timestamps", lambda d: d.update(started_at=d["ended_at"] + 1.0)),
    "ends-after-its-line": ("timestamps", lambda d: d.update(ended_at=d["t"] + TH["clock_skew_s"] + 1.0)),
    "starts-before-attempt": ("timestamps", lambda d: d.update(started_at=d["started_at"] - 1e5)),
    "ends-before-previous": ("timestamps", lambda d: d.update(ended_at=d["ended_at"] - 9.0,
                                                              started_at=d["started_at"] - 9.0)),
    "starts-before-previous-ends": ("timestamps", lambda d: d.update(started_at=d["started_at"] - 1.0)),
    "images-evaluated": ("validation", lambda d: d.update(images_evaluated=d["images_evaluated"] - 1)),
    "images-trained": ("images", lambda d: d.update(images_trained=int(IMAGES_CAP) + 1)),
    "rate-over-peak": ("epoch_rate", lambda d: d.update(started_at=d["ended_at"] - 1e-9)),
}
EDITED = (25, 60, 95)  # which epoch lines fail the check (of those that are a trial's second or later)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # retries, epochs of varied length: trials overlap at chunk edges
    return make_run(tmp_path_factory.mktemp("checks") / "run", slots=4, trials=24, epochs=lambda i: 3 + i % 6,
                    retry_trials={3, 10, 17}, epoch_seconds=lambda i, e: 2.0 + 0.37 * ((i * 7 + e) % 5)).path


def failing(base: Path, dest: Path, check: str) -> Path:
    """The base run, with the `EDITED` epoch lines made to fail `check` (and the log re-chained)."""
    shutil.copytree(base, dest)
    log = dest / "events.jsonl"
    lines = log.read_bytes().split(b"\n")[:-1]
    later = [i for i in epochs_at(lines) if json.loads(lines[i])["epoch"] >= 2]
    for k in EDITED:
        d = json.loads(lines[later[k]])
        CHECKS[check][1](d)
        lines[later[k]] = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
    log.write_bytes(b"\n".join(rechain(lines)) + b"\n")
    return dest


def findings(path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool, chunk: int = 0) -> tuple[dict[str, Any], str]:
    """Every finding of the audit (its count and first messages), the fastest epoch, and the report."""
    monkeypatch.setattr(verify_module, "FAST_FOLD", fast)
    monkeypatch.setattr(logchunks, "MIN_PARALLEL", 0)
    if chunk:
        monkeypatch.setattr(logchunks, "CHUNK", chunk)
    folds: list[fastfold.Fold] = []
    init = fastfold.Fold.__init__

    def spy(self: fastfold.Fold, *a: Any, **kw: Any) -> None:
        init(self, *a, **kw)
        folds.append(self)

    monkeypatch.setattr(fastfold.Fold, "__init__", spy)
    report = json.dumps(verify_module.verify(path, workers=1), sort_keys=True)
    audit = folds[-1].audit
    found = {name: (v.count, v.messages) for name, v in vars(audit).items() if isinstance(v, Findings)}
    found["max_epoch"] = (audit.max_epoch_ratio, audit.max_epoch_rate)
    if fast:
        assert folds[-1].fast and folds[-1].free_epochs > 0  # the vectorised checks did decide
    return found, report


@pytest.mark.parametrize("check", list(CHECKS))
def test_both_folds_find_alike(check: str, base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = failing(base, tmp_path / "run", check)
    expected, report = findings(run, monkeypatch, fast=False)
    count, messages = expected[CHECKS[check][0]]
    assert count >= len(EDITED), (check, messages)  # the lines do fail the check
    for chunk in (900, 4000):
        assert findings(run, monkeypatch, fast=True, chunk=chunk) == (expected, report), (check, chunk)


def test_every_check_is_here() -> None:
    """`on_epoch` (and `_rate`, which it calls) add to these findings as many times as `CHECKS` says:
    a check added there and not here fails this test."""
    source = inspect.getsource(LogAudit.on_epoch) + inspect.getsource(LogAudit._rate)
    made = Counter(re.findall(r"self\.(\w+)\.add\(", source))
    assert made == Counter(findings_of for findings_of, _ in CHECKS.values())
