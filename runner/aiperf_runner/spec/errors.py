"""The base of every error the runner raises on purpose: `aiperf-runner` prints its message and exits with its code.

Each error keeps its older base too (ValueError, RuntimeError, OSError), so callers that catch those still do.
"""

from __future__ import annotations


class AiperfError(Exception):
    """An error with a message meant for the user; the command line prints `error: <message>` and exits with
    `exit_code` (1: failed, refused or rejected; a subclass for usage errors says 2)."""

    exit_code: int = 1
