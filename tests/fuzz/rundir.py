"""A small valid run directory (devdata/runfactory.py) copied for each example, and verify() on it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from aiperf_runner.spec.verify import verify

from devdata.runfactory import make_run


@cache
def template() -> Path:
    path = Path(tempfile.mkdtemp(prefix="aiperf-fuzz-template-")) / "run"
    make_run(path, slots=1, trials=2, epochs=2, seed=1)
    return path


@contextmanager
def copy() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="aiperf-fuzz-") as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(template(), run)
        yield run


def verified(run: Path) -> dict[str, Any]:
    """verify() of a run: whatever is wrong with it must be a failed check in the report, never an exception."""
    report = verify(run, workers=1)
    assert isinstance(report, dict) and isinstance(report.get("checks"), list) and report["checks"]
    assert all(isinstance(c.get("passed"), bool) for c in report["checks"])
    return report
