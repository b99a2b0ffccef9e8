"""One controller per run directory: `controller.lock`, held with flock for the controller's life."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

from aiperf_runner.rundir.config import ControllerError

LOCK_FILE = "controller.lock"


def lock(run_dir: Path) -> Any:
    """Hold `controller.lock` (flock) for the controller's life: one controller per run directory."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fh = open(run_dir / LOCK_FILE, "a+")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip()
        fh.close()
        raise ControllerError(f"{run_dir} is being run by another controller (pid {holder or '?'})") from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


def unlock(fh: Any, run_dir: Path) -> None:
    if fh is None or fh.closed:
        return
    try:
        (run_dir / LOCK_FILE).unlink(missing_ok=True)
    finally:
        fh.close()


def controller_alive(run_dir: str | Path) -> int | None:
    """The pid of the controller running this directory, or None if none holds its lock."""
    path = Path(run_dir) / LOCK_FILE
    try:
        fh = open(path)
    except FileNotFoundError:
        return None
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = fh.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return None
