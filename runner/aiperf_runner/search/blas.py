"""Keep the search's linear algebra on one BLAS thread while it runs beside training.

`blas_single_thread()` is a context manager: threadpoolctl's limit when threadpoolctl is installed,
else OpenBLAS's own thread setter, found by probing the OpenBLAS libraries mapped into this
process (Linux /proc/self/maps) for their `*_set_num_threads` symbols.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Any

try:  # optional: keep the search to one BLAS thread (it runs beside training on the same cores)
    from threadpoolctl import threadpool_limits as _threadpool_limits
except ImportError:  # pragma: no cover - depends on the environment
    _threadpool_limits = None

_openblas: list[tuple[Any, Any]] | None = None


def _openblas_controls() -> list[tuple[Any, Any]]:
    """(get_num_threads, set_num_threads) of every OpenBLAS loaded in this process (Linux)."""
    global _openblas
    if _openblas is None:
        found = []
        try:
            with open("/proc/self/maps", encoding="utf-8") as fh:
                paths = sorted({line.split()[-1] for line in fh
                                if "openblas" in line.rsplit("/", 1)[-1].lower() and "/" in line})
        except OSError:
            paths = []
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for prefix in ("scipy_openblas", "openblas"):
                for suffix in ("64_", ""):
                    get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                    put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                    if get is not None and put is not None:
                        found.append((get, put))
                        break
                else:
                    continue
                break
        _openblas = found
    return _openblas


@contextlib.contextmanager
def blas_single_thread() -> Iterator[None]:
    """Run the search's linear algebra on one BLAS thread.

    The search runs beside training on the same cores; there a multi-threaded OpenBLAS spins for its
    share of busy cores, and a 50x50 triangular solve took 24 ms instead of 20 us, a 1,000 x 1,000
    Cholesky 0.6 s instead of 60 ms (2-core machine under load). Uses threadpoolctl when installed,
    else OpenBLAS's own setter (process-wide while the block runs)."""
    if _threadpool_limits is not None:
        with _threadpool_limits(limits=1, user_api="blas"):
            yield
        return
    controls = _openblas_controls()
    saved = [(put, get()) for get, put in controls]
    for put, _n in saved:
        put(1)
    try:
        yield
    finally:
        for put, n in saved:
            put(n)
