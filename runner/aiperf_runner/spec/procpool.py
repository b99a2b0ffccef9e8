"""The process pools of verification (spec/runio.py, spec/logchunks.py): forkserver where there is one."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

PRELOAD = ["aiperf_runner.spec.epochscan", "aiperf_runner.spec.runio"]
"""Imported once by the fork server, so that a worker it forks starts with them (not each worker)."""


def process_pool(workers: int) -> ProcessPoolExecutor | None:
    """A pool of `workers` processes (forkserver where there is one), or None where processes
    cannot be started (a daemonic worker, limits)."""
    try:
        import multiprocessing

        if "forkserver" in multiprocessing.get_all_start_methods():
            server = multiprocessing.get_context("forkserver")
            server.set_forkserver_preload(PRELOAD)  # (no effect once this process's fork server runs)
            return ProcessPoolExecutor(max_workers=workers, mp_context=server)
        return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    except Exception:  # noqa: BLE001 - no processes here: stay in this process
        return None


class SharedPool:
    """One pool for the steps of a verification (reading the trials' files, then the log), made
    when first asked for: its workers start once. `close()` ends it (pending work is cancelled)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._tried = False

    def get(self) -> ProcessPoolExecutor | None:
        if not self._tried:
            self._tried = True
            self._pool = process_pool(self.workers) if self.workers >= 2 else None
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> SharedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
