"""The exit codes of `aiperf-runner`, in one table, and the usage error that exits with 2.

Every command exits with one of these; an `AiperfError` reaching the command line exits with its
class's `exit_code` (aiperf_runner/cli/__init__.py prints its message).
"""

from __future__ import annotations

from aiperf_runner.spec.errors import AiperfError

SUCCESS = 0  # done: verified, registered, integrity OK
FAILURE = 1  # failed, refused or rejected (the message says why); AiperfError's own exit code
USAGE = 2  # a bad option value or a missing path (click's own usage errors exit 2 too)
TIMED_OUT = 3  # still waiting when --timeout ran out (`submit`: not verified yet)
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it)


class UsageError(AiperfError):
    """A bad option value or a path that is not there: exit code 2, as click's own usage errors."""

    exit_code = USAGE
