"""The search beside training: a thread that keeps candidates ready, so a slot never waits for it.

All calls into the architecture search happen on the buffer's thread, so the search needs no
locking; the controller only puts results in and takes candidates out. Each accuracy reaches the
search paired with the architecture hash of the trial that produced it.

Each candidate comes with what the controller needs of it at once, made on the buffer's side: the
graph's JSON text (written as the trial's graph.json) and its FLOPs per image under the run's
rules (for the live score), so the controller's loop neither serialises nor counts a graph.

With `process=True` (the controller's choice from `SEARCH_PROCESS_MIN_SLOTS` slots) the search
itself runs in a process of its own (search/process.py; the buffer's thread sends it the results
and the number of candidates wanted, and receives the candidates): its CPU then never competes with the
controller's loop for one interpreter lock. At 4,096 slots the search is about half of the
controller process's CPU, and every system call of the loop (a log line, a trial's files) waited
for the search's thread to give the lock back. A search that does not pickle stays on the thread.
"""

from __future__ import annotations

import pickle
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from aiperf_runner.data.presets import Preset
from aiperf_runner.search.protocols import ArchitectureSearcher, HparamOptimiser
from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.graph import Graph
from aiperf_runner.spec.presetfacts import KERNEL_SIZE


@dataclass
class Candidate:
    graph: Graph
    arch_hash: str
    parent_hash: str | None
    morphisms: list[str]
    text: str = ""  # graph.dumps(): the trial's graph.json
    flops: tuple[float, float] | None = None  # (train, eval) FLOPs per image under the run's rules, kernel size 3


def candidate(proposal: Any, rules: str | None) -> Candidate:
    """A proposal as the controller takes it: with its graph's JSON text and, given `rules`, its FLOPs."""
    graph = proposal.graph
    flops = None
    if rules is not None:
        counts = flops_per_image(graph, rules=rules, kernel_size=KERNEL_SIZE)
        flops = (float(counts.train), float(counts.eval))
    return Candidate(graph, proposal.arch_hash, proposal.parent_hash, list(proposal.morphisms), graph.dumps(), flops)


BATCH_MAX = 32  # candidates asked of the search at once, when it offers `propose_batch`
SEARCH_PROCESS_MIN_SLOTS = 64  # from this many slots the controller runs the search in a process of its own


def _propose(search: ArchitectureSearcher, want: int) -> list[Any]:
    batch = getattr(search, "propose_batch", None)
    if batch is not None and want > 1:
        return list(batch(min(want, BATCH_MAX)))
    proposal = search.propose()
    return [] if proposal is None else [proposal]


def _turn(search: ArchitectureSearcher, results: list[tuple[str, float]], want: int,
          rules: str | None) -> list[Candidate]:
    """One turn of the buffer: the results to the search, then up to `want` candidates from it."""
    for arch_hash, acc in results:
        search.observe(arch_hash, acc)
    if want <= 0:
        return []
    return [candidate(p, rules) for p in _propose(search, want)]


class SearchProcessError(AiperfError, RuntimeError):
    """The search's process failed (its error and traceback), or died."""


class _SearchProcess:
    """The search in a process of its own (`python -m aiperf_runner.search.process`, search/process.py),
    reached over a socket pair; `turn` as `_turn`. Started as a plain program, not through
    multiprocessing's spawn, so that the controller's main module is never imported again there."""

    def __init__(self, blob: bytes, rules: str | None) -> None:
        ours, theirs = socket.socketpair()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "aiperf_runner.search.process", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, close_fds=True,
                start_new_session=True)  # a Ctrl-C is the controller's to handle (a clean stop), not the search's
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        self._conn.send((blob, rules))
        self.cpu_s = 0.0  # the process's own CPU seconds, as of its last reply

    def turn(self, results: list[tuple[str, float]], want: int) -> list[Candidate]:
        try:
            self._conn.send((results, want))
            status, payload, self.cpu_s = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise SearchProcessError(f"the search's process died (exit status {self._process.poll()})") from exc
        if status != "ok":
            raise SearchProcessError(f"the search's process failed: {payload}")
        return list(payload)

    def close(self) -> None:
        try:
            self._conn.send(None)
        except (OSError, ValueError):
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=5)
        self._conn.close()


def ready_target(slots: int) -> int:
    """Candidates to keep ready: 8 (fewer for fewer slots), up to one for every 16 slots beyond that,
    at most 256: enough that a burst of slots ending together never waits for the search."""
    return max(2, min(slots, 8)) if slots <= 128 else min(256, slots // 16)


class ProposalBuffer:
    """A thread that keeps `target` candidates ready and feeds results to the search.

    All calls into the search happen on this thread (or, with `process`, in the search's own
    process, driven from this thread), so the search needs no locking; the controller only puts
    results in and takes candidates out. A search with `propose_batch(count)` is asked for the
    whole shortfall at once (at most `BATCH_MAX`): one model fit and one annealing pass serve many
    slots.
    """

    def __init__(self, search: ArchitectureSearcher, target: int, rules: str | None = None,
                 process: bool = False) -> None:
        self.search = search  # with a process: the search as it was sent there (the process's copy learns)
        self.rules = rules  # with rules, each candidate carries its FLOPs per image under them
        self.process = process
        self._host: _SearchProcess | None = None
        self.target = max(1, target)
        self.floor = 0  # more than `target` kept ready while the first wave is made (`wait_ready`)
        self._ready: deque[Candidate] = deque()
        self._results: deque[tuple[str, float]] = deque()
        self._cond = threading.Condition()
        self._stop = False
        self.error: BaseException | None = None
        self.exhausted = False
        self.proposals = 0
        self.propose_seconds = 0.0
        self._thread = threading.Thread(target=self._loop, name="proposal-buffer", daemon=True)

    def start(self) -> ProposalBuffer:
        if self.process:
            try:
                blob = pickle.dumps(self.search)
            except Exception:  # noqa: BLE001 - a search that does not pickle runs on the thread
                self.process = False
            else:
                self._host = _SearchProcess(blob, self.rules)
        self._thread.start()
        return self

    @property
    def search_process_cpu_s(self) -> float:
        """CPU seconds of the search's own process (0 without one)."""
        return self._host.cpu_s if self._host is not None else 0.0

    def _loop(self) -> None:
        while True:
            with self._cond:
                # A search in its own process gets the results with the next request for
                # candidates (it learns from them at that turn anyway): one round trip, not one a result.
                while not self._stop and (not self._results or self._host is not None) and (
                        self._wanted() <= 0 or self.exhausted):
                    self._cond.wait()
                if self._stop:
                    return
                results = list(self._results)
                self._results.clear()
                want = 0 if self.exhausted else self._wanted()
            try:
                t = time.perf_counter()
                if self._host is not None:
                    proposals = self._host.turn(results, want)
                else:
                    proposals = _turn(self.search, results, want, self.rules)
                if want <= 0:
                    continue
                self.propose_seconds += time.perf_counter() - t
            except BaseException as exc:  # noqa: BLE001 - handed to the controller
                with self._cond:
                    self.error = exc
                    self._cond.notify_all()
                return
            with self._cond:
                if not proposals:
                    self.exhausted = True
                for proposal in proposals:
                    self.proposals += 1
                    self._ready.append(proposal)
                self._cond.notify_all()

    def _wanted(self) -> int:
        """Candidates to ask for now: the shortfall once it is worth a batch (half the target, at
        most BATCH_MAX), so that one candidate taken is not one search; any shortfall while the
        first wave is made."""
        shortfall = max(self.target, self.floor) - len(self._ready)
        if self.floor or shortfall >= max(1, min(BATCH_MAX, self.target // 2)):
            return shortfall
        return 0

    def observe(self, arch_hash: str, accuracy: float) -> None:
        with self._cond:
            self._results.append((arch_hash, float(accuracy)))
            self._cond.notify_all()

    def take(self) -> Candidate | None:
        with self._cond:
            if self.error is not None:
                raise self.error
            if self._ready:
                candidate = self._ready.popleft()
                self._cond.notify_all()
                return candidate
            return None

    def wait_ready(self, count: int, timeout: float) -> None:
        """Block until `count` candidates are ready (or the search is exhausted / failed / timeout)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self.floor = count
            self._cond.notify_all()
            while (len(self._ready) < count and not self.exhausted and self.error is None
                   and time.monotonic() < deadline):
                self._cond.wait(timeout=max(0.0, deadline - time.monotonic()))
            self.floor = 0

    @property
    def idle_exhausted(self) -> bool:
        with self._cond:
            return self.exhausted and not self._ready

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=10)
        if self._host is not None:
            self._host.close()


def make_search(preset: Preset, dataset: dict[str, Any], seed: int,
                history: list[dict[str, Any]] | None = None) -> tuple[ArchitectureSearcher, HparamOptimiser]:
    """The architecture search (seeded with the preset's seed graph) and the hyper-parameter search.

    `history` (on resume): the log's trials in proposal order, each {"trial", "graph", "arch_hash",
    "parent_hash", "parent", "morphisms", "hparams", "hparam_source", "round", "accuracy" (None
    unless finished)}; both searches are rebuilt from it.
    """
    from aiperf_runner.search.bayesian import ArchitectureSearch
    from aiperf_runner.search.hparams import HparamSearch
    from aiperf_runner.spec.seeds import search_bounds, seed_for_preset

    seed_graph = seed_for_preset(preset.name, int(dataset["classes"]), int(dataset["image_size"]))
    bounds = search_bounds(preset, seed_graph)  # the preset's bounds on a proposal's size
    if not history:
        return (ArchitectureSearch(seed_graph, rng_seed=seed, max_train_flops=bounds["max_train_flops"],
                                   max_layers=bounds["max_layers"]),
                HparamSearch(preset.name, seed=seed))
    search = ArchitectureSearch.from_history(seed_graph, history, rng_seed=seed, **bounds)
    hparams = HparamSearch.from_history(history, preset=preset.name, seed=seed)
    return search, hparams
