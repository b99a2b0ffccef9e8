"""Units of the controller's scale work: proposals asked for in batches, the ready target by slots,
waiting trials kept without a scan, a backend without a news channel (well under a second)."""

from __future__ import annotations

from pathlib import Path

from aiperf_runner.backends.base import load_backend
from aiperf_runner.run.state import RunState
from aiperf_runner.search.bayesian import ArchitectureSearch
from aiperf_runner.search.buffer import BATCH_MAX, ProposalBuffer, ready_target
from aiperf_runner.spec.seeds import small_resnet


def test_the_ready_target_grows_with_slots_within_bounds() -> None:
    assert [ready_target(n) for n in (1, 2, 8, 64, 512, 4096, 100_000)] == [2, 2, 8, 8, 32, 256, 256]


def test_the_buffer_asks_for_its_shortfall_in_batches() -> None:
    search = ArchitectureSearch(small_resnet(), rng_seed=0, n_neighbours=4, max_expansions=4)
    calls: list[int] = []
    batch = search.propose_batch

    def counted(count: int):  # type: ignore[no-untyped-def]
        calls.append(count)
        return batch(count)

    search.propose_batch = counted  # type: ignore[method-assign]
    buffer = ProposalBuffer(search, target=4).start()
    try:
        buffer.wait_ready(12, timeout=60)  # the first wave: more than the target
        taken = [buffer.take() for _ in range(12)]
    finally:
        buffer.stop()
    assert all(c is not None for c in taken)
    assert len({c.arch_hash for c in taken if c is not None}) == 12
    assert calls and max(calls) <= BATCH_MAX and max(calls) > 1
    assert len(calls) < 12  # fewer searches than proposals


def _event(kind: str, trial: str, **fields: object) -> dict[str, object]:
    return {"type": kind, "trial": trial, "t": 1.0, **fields}


def test_waiting_trials_in_proposal_order_as_events_apply() -> None:
    state = RunState()
    state.apply({"type": "run_started", "t": 0.0, "slots": 2, "run_id": "r"})
    for i in range(3):
        state.apply(_event("trial_proposed", f"t{i:04d}", arch_hash=f"h{i}", round=0, epoch_budget=1))
    assert [tr.trial for tr in state.waiting()] == ["t0000", "t0001", "t0002"]
    state.apply(_event("trial_started", "t0000", attempt=1, slot=0))
    state.apply(_event("trial_started", "t0001", attempt=1, slot=1))
    assert [tr.trial for tr in state.waiting()] == ["t0002"]
    state.apply(_event("trial_failed", "t0001", attempt=1, error="x", retry=True))
    assert [tr.trial for tr in state.waiting()] == ["t0001", "t0002"]  # the retry first: proposed earlier
    state.apply(_event("trial_failed", "t0000", attempt=1, error="x", retry=False))
    assert [tr.trial for tr in state.waiting()] == ["t0001", "t0002"]


def test_a_backend_without_a_news_channel_says_so(tmp_path: Path) -> None:
    backend = load_backend("inprocess")(tmp_path, slots=1)
    assert backend.wait_changed(0.01) is None
    sim = load_backend("sim")(tmp_path, slots=1)
    try:
        assert sim.wait_changed(0.01) == set()
    finally:
        sim.shutdown()


def test_a_group_commit_writer_syncs_on_demand_and_on_close(tmp_path: Path) -> None:
    from aiperf_runner.spec.eventlog import EventWriter, iter_events

    log = tmp_path / "events.jsonl"
    writer = EventWriter(log, durability="batch")
    writer.append("run_started", run_id="r")
    assert writer._unsynced  # written and flushed to the OS, not yet fsync'ed
    assert [e.data["type"] for e in iter_events(log)] == ["run_started"]  # a reader sees it at once
    writer.sync()
    assert not writer._unsynced
    writer.append("run_finished", reason="duration")
    writer.close()
    assert not writer._unsynced
    resumed = EventWriter(log)  # the chain continues
    resumed.append("run_resumed", run_id="r")
    resumed.close()
    assert [e.data["seq"] for e in iter_events(log)] == [0, 1, 2]


def test_the_buffer_refills_in_batches_not_one_by_one() -> None:
    search = ArchitectureSearch(small_resnet(), rng_seed=0, n_neighbours=4, max_expansions=4)
    buffer = ProposalBuffer(search, target=8)
    buffer.floor = 0
    assert buffer._wanted() == 8  # empty: the whole target
    buffer._ready.extend([None] * 7)  # type: ignore[list-item]
    assert buffer._wanted() == 0  # one short: not worth a search yet
    for _ in range(3):
        buffer._ready.pop()
    assert buffer._wanted() == 4  # half the target short: one batch
    buffer.floor = 12
    assert buffer._wanted() == 8  # the first wave: any shortfall


def test_the_weight_keeper_follows_the_best_trial_without_scanning(tmp_path: Path) -> None:
    """The best trial as `best_of` finds it (higher accuracy, on a tie the earlier proposed), kept up
    to date as trials finish in any order; what is kept for being the best is dropped when superseded."""
    from aiperf_runner.run.weightkeeper import WeightKeeper, best_of

    state = RunState()
    logged: list[tuple[str, str, str]] = []

    def log(kind: str, **fields: object) -> dict[str, object]:
        event = {"type": kind, "t": 1.0, **fields}
        state.apply(event)
        logged.append((kind, str(fields["trial"]), str(fields["reason"])))
        return event

    state.apply({"type": "run_started", "t": 0.0, "slots": 8, "run_id": "r"})
    accuracies = {"t0000": 0.5, "t0001": 0.7, "t0002": 0.6, "t0003": 0.7, "t0004": 0.9}
    for trial in accuracies:
        state.apply(_event("trial_proposed", trial, arch_hash=trial, round=0, epoch_budget=1))
        state.apply(_event("trial_started", trial, attempt=1, slot=int(trial[1:])))
    keeper = WeightKeeper(tmp_path, state, log, keep_share=0.0, witnessed=False)
    for trial in ("t0003", "t0000", "t0001", "t0002", "t0004"):  # t0001 ties t0003, proposed earlier
        state.apply(_event("trial_finished", trial, attempt=1, epochs=1, best_accuracy=accuracies[trial],
                           reason="budget", weights_sha256="0" * 64))
        keeper.finished(state.trials[trial])
        assert keeper.best is best_of(state)
    assert keeper.best is not None and keeper.best.trial == "t0004"
    assert [e for e in logged if e[0] == "weights_kept"] == [
        ("weights_kept", "t0003", "unwitnessed"), ("weights_kept", "t0001", "unwitnessed"),
        ("weights_kept", "t0004", "unwitnessed")]
    assert ("weights_dropped", "t0003", "superseded") in logged and ("weights_dropped", "t0001", "superseded") in logged
    assert {t for t, tr in state.trials.items() if tr.weights == "kept"} == {"t0004"}


def test_the_search_in_a_process_of_its_own_proposes_and_learns() -> None:
    """With `process=True` the search runs in a child process (search/process.py): candidates come
    back with their graph's JSON and FLOPs, results reach it, and stop() ends the process."""
    from aiperf_runner.spec.flops import flops_per_image

    buffer = ProposalBuffer(ArchitectureSearch(small_resnet(), rng_seed=0, n_neighbours=4, max_expansions=4),
                            target=4, rules="v2", process=True).start()
    try:
        assert buffer._host is not None
        buffer.wait_ready(10, timeout=60)
        first = [buffer.take() for _ in range(10)]
        assert all(c is not None for c in first)
        for i, c in enumerate(first):
            assert c is not None
            counts = flops_per_image(c.graph)
            assert c.flops == (counts.train, counts.eval) and c.text == c.graph.dumps()
            buffer.observe(c.arch_hash, 0.5 + 0.01 * i)
        buffer.wait_ready(4, timeout=60)
        later = [buffer.take() for _ in range(4)]
        hashes = [c.arch_hash for c in first + later if c is not None]
        assert len(hashes) == len(set(hashes)) == 14
        assert buffer.search_process_cpu_s > 0
        process = buffer._host._process
    finally:
        buffer.stop()
    assert process.returncode == 0


def test_a_dead_search_process_is_the_controllers_error() -> None:
    import pytest
    from aiperf_runner.search.buffer import SearchProcessError

    buffer = ProposalBuffer(ArchitectureSearch(small_resnet(), rng_seed=0, n_neighbours=4, max_expansions=4),
                            target=4, process=True).start()
    try:
        buffer.wait_ready(4, timeout=60)
        assert buffer._host is not None
        buffer._host._process.kill()
        buffer._host._process.wait()
        with pytest.raises(SearchProcessError, match="died"):
            for _ in range(100):  # the buffer asks for more once half its target is taken
                buffer.take()
                buffer.wait_ready(4, timeout=5)
    finally:
        buffer.stop()


def test_a_search_that_does_not_pickle_stays_on_the_thread() -> None:
    search = ArchitectureSearch(small_resnet(), rng_seed=0, n_neighbours=4, max_expansions=4)
    search.unpicklable = lambda: None  # type: ignore[attr-defined]
    buffer = ProposalBuffer(search, target=2, process=True).start()
    try:
        buffer.wait_ready(2, timeout=60)
        assert buffer._host is None and not buffer.process and buffer.take() is not None
    finally:
        buffer.stop()
