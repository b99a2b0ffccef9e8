"""The event schema (spec/schema.py) and the one replay of the log (spec/replay.py) agree with each
other, with the docs, and with every reader of a log."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.run.state import RunState
from aiperf_runner.spec import replay, schema
from aiperf_runner.spec.eventlog import iter_events

from devdata.runfactory import TestWitness, make_run

REPO = Path(__file__).resolve().parents[2]


def test_every_event_type_of_the_schema_is_handled_by_the_replay() -> None:
    # Adding an event type to the schema without teaching the replay about it fails here.
    assert set(schema.EVENTS) == set(replay.HANDLED)
    assert schema.types(schema.MAIN) | schema.types(schema.TRIAL) == set(schema.EVENTS)


@pytest.mark.parametrize("log", [schema.MAIN, schema.TRIAL])
def test_the_docs_event_tables_are_the_schema(log: str) -> None:
    doc = (REPO / "docs" / "internals.md").read_text()
    assert schema.markdown_table(log) in doc, (
        f"docs/internals.md's {log} log event table differs from spec/schema.py: paste the output of "
        f"`python -m aiperf_runner.spec.schema {log}`")


@pytest.fixture(scope="module")
def sample_events(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """One real event of every type (factory run for the main log and a trial log; the rest by hand)."""
    run = make_run(tmp_path_factory.mktemp("schema") / "run", slots=2, trials=3, retry_trials={1},
                   witness=TestWitness(interval=5.0))
    events: dict[str, dict[str, Any]] = {}
    for path in (run.path / "events.jsonl", run.path / "trials" / "t0000" / "events.jsonl"):
        for e in iter_events(path):
            events.setdefault(e.data["type"], e.data)
    base = {"seq": 0, "t": 1.0, "prev": "0" * 64}
    events["run_resumed"] = {**base, "type": "run_resumed", "run_id": run.run_id}
    events["trial_cancelled"] = {**base, "type": "trial_cancelled", "trial": "t0001", "attempt": 1, "reason": "stop"}
    events["slot_lost"] = {**base, "type": "slot_lost", "slot": 1, "reason": "node down"}
    events["trial_error"] = {**base, "type": "trial_error", "trial": "t0001", "attempt": 2, "error": "boom"}
    events["weights_kept"] = {**base, "type": "weights_kept", "trial": "t0001", "sha256": "ab" * 32, "reason": "beacon"}
    events["weights_dropped"] = {**base, "type": "weights_dropped", "trial": "t0002", "reason": "superseded"}
    assert set(events) == set(schema.EVENTS)
    return events


def test_real_events_are_valid(sample_events: dict[str, dict[str, Any]]) -> None:
    for kind, ev in sample_events.items():
        log = schema.MAIN if kind in schema.types(schema.MAIN) else schema.TRIAL
        assert schema.valid(ev), kind
        assert schema.problem(ev, log) is None, kind


BAD_VALUES = [None, "x", -1, 1.5, True, float("nan"), [], {}]


def test_the_compiled_validator_and_the_messages_agree_field_by_field(
        sample_events: dict[str, dict[str, Any]]) -> None:
    """For every field of every type: drop it, or give it a wrong value; both paths must agree."""
    for kind, ev in sample_events.items():
        log = schema.MAIN if kind in schema.types(schema.MAIN) else schema.TRIAL
        for f in schema.EVENTS[kind].fields:
            missing = {k: v for k, v in ev.items() if k != f.name}
            if f.required:
                assert not schema.valid(missing)
                assert schema.problem(missing, log) == f"{kind}: missing field {f.name!r}"
            else:
                assert schema.valid(missing) and schema.problem(missing, log) is None
            for bad in BAD_VALUES:
                changed = {**ev, f.name: bad}
                problem = schema.problem(changed, log)
                assert schema.valid(changed) == (problem is None), (kind, f.name, bad)
                if problem is not None:
                    assert f"field {f.name!r}" in problem and f.expects in problem


def test_unknown_types_and_types_of_the_other_log() -> None:
    assert schema.problem({"type": "trial_result"}, schema.MAIN) == "unknown event type 'trial_result'"
    assert schema.problem({"type": "nonsense"}) == "unknown event type 'nonsense'"
    assert not schema.valid({"type": "nonsense"})


def test_replay_counts_repeats_once_and_reports_anomalies() -> None:
    found: list[tuple[str, str]] = []

    class Listener:
        def on_anomaly(self, kind: str, line: int, message: str) -> None:
            found.append((kind, message))

    r = replay.Replay(listeners=(Listener(),))
    t = [100.0]

    def ev(kind: str, **fields: Any) -> None:
        t[0] += 1
        r.apply({"type": kind, "t": t[0], **fields})

    def epoch(trial: str, attempt: int, n: int, acc: float = 0.5) -> None:
        ev("epoch_end", trial=trial, attempt=attempt, epoch=n, images_trained=10, images_evaluated=5,
           val_accuracy=acc, val_loss=1.0, started_at=t[0], ended_at=t[0] + 0.5, seconds=0.5)

    ev("run_started", run_id="a" * 32, slots=1, preset="smoke", rules="v2", runner_version="0", spec_version="1")
    ev("trial_proposed", trial="t0000", arch_hash="h", parent=None, morphisms=[], hparams={}, hparam_source="seed",
       round=0, epoch_budget=3)
    ev("trial_started", trial="t0000", attempt=1, slot=0, nodes=["n"], devices=1)
    epoch("t0000", 1, 1, 0.4)
    ev("trial_failed", trial="t0000", attempt=1, error="lost", retry=True)
    ev("trial_started", trial="t0000", attempt=2, slot=0, nodes=["n"], devices=1)
    epoch("t0000", 2, 1, 0.9)  # re-ran epoch 1 without a checkpoint: not counted again
    epoch("t0000", 2, 3, 0.6)  # a gap
    ev("run_resumed", run_id="a" * 32)
    epoch("t0000", 2, 4, 0.7)  # late epoch of an attempt the crash cut: allowed
    ev("trial_failed", trial="t0000", attempt=2, error=replay.INTERRUPTED, retry=True)
    ev("trial_started", trial="t0001", attempt=1, slot=3, nodes=["n"], devices=1)  # never proposed, no such slot
    tr = r.trials["t0000"]
    assert (tr.last_epoch, tr.epochs_counted, r.repeated_epochs) == (4, 3, 1)
    assert tr.epoch_best == 0.7 and r.best_epoch_accuracy == 0.7
    assert tr.failures == 1 and tr.interruptions == 1 and tr.status == "retry"
    assert [k for k, _ in found] == ["lifecycle", "lifecycle", "concurrency"]
    assert "follows epoch 1 (a gap)" in found[0][1] and "never proposed" in found[1][1]
    assert "slot 3 does not exist" in found[2][1]


def test_the_runner_the_score_and_verify_read_the_same_replay(tmp_path: Path) -> None:
    """RunState (the controller's view) and verify()'s figures come from one fold of the same log."""
    from aiperf_runner.run.state import load_scored
    from aiperf_runner.spec.verify import verify

    run = make_run(tmp_path / "run", slots=3, trials=10, epochs=4, retry_trials={2, 5})
    state, scored = load_scored(run.path)
    report = verify(run.path)
    assert scored is not None
    assert scored.series().score == report["score_ops"]
    assert state.trials_finished == report["trials_finished"] == 10
    assert sum(tr.epochs_counted for tr in state.trials.values()) == report["epochs"] == run.epochs
    kept = RunState.load(run.path)
    assert sum(len(tr.epochs) for tr in kept.trials.values()) == report["epochs"]


def test_the_trial_program_resumes_from_the_replay_of_its_own_log(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from aiperf_runner.train.trial import _logged_state

    run = make_run(tmp_path / "run", slots=1, trials=1, epochs=3)
    log = run.path / "trials" / "t0000" / "events.jsonl"
    assert _logged_state(log, "t0000") == (3, True)
    lines = log.read_bytes().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:4]))  # epoch_states and epoch_end of epochs 1 and 2
    assert _logged_state(cut, "t0000") == (2, False)
    assert _logged_state(tmp_path / "none.jsonl", "t0000") == (0, False)


def test_schema_module_prints_the_table() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "aiperf_runner.spec.schema", "main"], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == schema.markdown_table("main")
    assert re.search(r"^\| `epoch_end` \|", out, re.M)
    json.dumps(list(schema.EVENTS))


def test_epoch_end_may_name_the_accelerators_of_its_attempt(sample_events: dict[str, dict[str, Any]]) -> None:
    """Optional: logs written before the field still verify; when present it must be well-formed."""
    ev = {k: v for k, v in sample_events["epoch_end"].items() if k != "accelerators"}
    for log in (schema.MAIN, schema.TRIAL):
        assert schema.valid(ev) and schema.problem(ev, log) is None
        mixed = {**ev, "accelerators": {"NVIDIA H100 80GB HBM3": 4, "NVIDIA A100-SXM4-80GB": 4}}
        assert schema.valid(mixed) and schema.problem(mixed, log) is None
        for bad in ({"cpu": 0}, {"": 1}, {"cpu": 1.0}, ["cpu"], {"x" * 201: 1}):
            assert not schema.valid({**ev, "accelerators": bad})
            assert "field 'accelerators'" in (schema.problem({**ev, "accelerators": bad}, log) or "")


def test_verification_notes_accelerators_that_are_not_the_registered_model() -> None:
    from aiperf_runner.spec.hardware import Hardware, SeenAccelerators

    seen = SeenAccelerators()
    r = replay.Replay(listeners=(seen,))
    for n, accelerators in enumerate([{"NVIDIA H100 80GB HBM3": 8}, None, {"NVIDIA A100-SXM4-80GB": 4}], 1):
        extra = {"accelerators": accelerators} if accelerators else {}
        r.apply({"type": "epoch_end", "t": float(n), "trial": "t0000", "attempt": n, "epoch": n, "images_trained": 1,
                 "images_evaluated": 1, "val_accuracy": 0.5, "val_loss": 1.0, "started_at": 0.0, "ended_at": 1.0,
                 "seconds": 1.0, **extra})
    assert seen.ranks == {"NVIDIA H100 80GB HBM3": 8, "NVIDIA A100-SXM4-80GB": 4}
    h100 = Hardware(registered=True, accelerator_model="NVIDIA H100 SXM", accelerators_per_node=8, nodes=1)
    assert seen.not_registered(h100) == ["NVIDIA A100-SXM4-80GB"]  # the driver's name of the table's H100 is fine
    cpu = Hardware(registered=False, accelerator_model="cpu", accelerators_per_node=0, nodes=1)
    assert seen.not_registered(cpu) == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
    cpu_seen = SeenAccelerators()
    cpu_seen.ranks = {"cpu": 3}
    assert cpu_seen.not_registered(cpu) == [] and cpu_seen.not_registered(h100) == ["cpu"]
