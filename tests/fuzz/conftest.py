"""Property-based fuzzing of the readers of outside input (hypothesis): shared settings and the count
of cases each test ran, printed at the end of the session and written to test-artifacts/.

Every test here is bounded: `fuzz(n)` caps the examples (AIPERF_FUZZ_EXAMPLES_SCALE scales them, default 1.0)
and `bounded` the time bound per input (a SIGALRM that interrupts a hang) and its memory bound
(tracemalloc's peak of the Python allocations; torch's own tensors are not counted). The whole folder takes about 40 s.
"""

from __future__ import annotations

import os
import signal
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings

from tests.helpers import REPO

SCALE = float(os.environ.get("AIPERF_FUZZ_EXAMPLES_SCALE", "1.0"))
# The time one input may take a reader: far above what any of them needs (milliseconds), far below a hang.
TIME_BOUND = timedelta(seconds=5)
# The memory one input may make a reader hold (Python allocations): the inputs are at most a few KiB.
MEMORY_BOUND = 64 << 20
CASES: Counter[str] = Counter()
DETAILS: set[str] = set()


def fuzz(examples: int) -> settings:
    """Hypothesis settings of one fuzz test: `examples` cases (scaled), the time bound, no example database."""
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None, database=None,
                    derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                             HealthCheck.function_scoped_fixture])


@contextmanager
def bounded(what: str, seconds: float = TIME_BOUND.total_seconds(), memory: int = MEMORY_BOUND) -> Iterator[None]:
    """Fail when a reader takes longer than `seconds` on one input (hypothesis's deadline only measures a
    call that returns; this SIGALRM interrupts a hang; the tests run in the main thread), or when the
    Python objects it allocates at once (tracemalloc's peak) pass `memory` bytes."""
    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"{what} took more than {seconds} s on one input (a hang)")

    # pytest-timeout's own SIGALRM timer (pyproject.toml `timeout`) is put back afterwards, less the time spent.
    outer, started = signal.getitimer(signal.ITIMER_REAL)[0], time.monotonic()
    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
        assert peak <= memory, f"{what} held {peak} bytes at once on one input (bound: {memory})"
    finally:
        tracemalloc.stop()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer > 0:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 0.001))


def count(name: str, detail: bool = False) -> None:
    """One case of `name`; a `detail` ("name: outcome") is shown but not added to the total."""
    CASES[name] += 1
    if detail:
        DETAILS.add(name)


def pytest_terminal_summary(terminalreporter) -> None:
    if not CASES:
        return
    lines = [f"{name}: {n} cases" for name, n in sorted(CASES.items())]
    lines.append(f"total: {sum(n for name, n in CASES.items() if name not in DETAILS)} cases")
    terminalreporter.write_sep("-", "hypothesis fuzzing of the readers")
    for line in lines:
        terminalreporter.write_line(line)
    out = REPO / "test-artifacts"
    out.mkdir(exist_ok=True)
    (out / "hypothesis-cases.txt").write_text("\n".join(lines) + "\n")
