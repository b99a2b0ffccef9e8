"""The process pools of verification (spec/runio.py, spec/logchunks.py): forkserver where there is one."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor


def process_pool(workers: int) -> ProcessPoolExecutor | None:
    """A pool of `workers` processes (forkserver where there is one), or None where processes
    cannot be started (a daemonic worker, limits)."""
    try:
        import multiprocessing

        ctx = multiprocessing.get_context("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                                          else "spawn")
        return ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    except Exception:  # noqa: BLE001 - no processes here: stay in this process
        return None
