"""Each rule check of docs/design.md section 5, passing on a good run and failing on a run made to break it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.spec import rules as R
from aiperf_runner.spec import verify as spec_verify
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.graph import Graph

from devdata.runfactory import RunBuilder, TestWitness, make_run, registration_of, rewrite_events, small_graph

H100 = "NVIDIA H100 80GB HBM3"
H100_BF16 = 989.4e12


WITNESS = TestWitness()


def official(path: Path, **over: Any) -> Path:
    """An imagenet run of about 67 minutes on 4 slots of 2 H100s that passes every check."""
    params: dict[str, Any] = dict(preset="imagenet", slots=4, trials=16, epochs=4, epoch_seconds=250.0,
                                  precision="bf16", accelerator_model=H100, accelerator_count=8,
                                  devices_per_slot=2, declared_peak=8 * H100_BF16)
    params.update(over)
    make_run(path, witness=WITNESS, **params)
    return path


def verify(path: Path, **kw: Any) -> dict[str, Any]:
    """verify() against the registration of the hardware the run describes (as the service would),
    unless the test passes its own `system`."""
    kw.setdefault("system", registration_of(path))
    kw.setdefault("witness_keys", WITNESS.keys)
    return spec_verify.verify(path, **kw)


def checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def failed(report: dict[str, Any]) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["passed"]}


def edit_events(path: Path, fn: Callable[[dict[str, Any]], None], kind: str | None = None,
                index: int = 0) -> None:
    """Apply `fn` to the index-th event of type `kind` (or to all if index is None), re-chaining the log."""
    def edit(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        matching = [e for e in events if kind is None or e["type"] == kind]
        for e in (matching if index is None else [matching[index]]):
            fn(e)
        return events
    rewrite_events(path, edit)


def edit_run_json(path: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads((path / "run.json").read_text())
    fn(data)
    (path / "run.json").write_text(json.dumps(data))


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return official(tmp_path / "run")


def test_the_official_run_passes_every_check(good: Path) -> None:
    report = verify(good)
    assert failed(report) == set()
    assert report["division"] == "official"
    assert report["integrity_ok"] and report["valid"] and report["stable"] and report["plausible"]
    for c in report["checks"]:
        assert set(c) == {"name", "threshold", "measured", "passed", "message"}
        assert c["name"].split(".")[0] in {"integrity", "validity", "stability", "plausibility", "system", "witness", "audit"}
        assert c["message"]


def test_thresholds_are_one_versioned_table() -> None:
    th = R.thresholds()
    assert R.RULES_VERSION in R.THRESHOLDS
    assert th["min_duration_s"] == 3600.0 and th["min_max_accuracy"] == 0.70
    assert th["max_score_cv"] == 0.10
    with pytest.raises(ValueError, match="unknown rules version"):
        R.thresholds("0.0")


# ---- integrity ----------------------------------------------------------------------------------

def test_chain_broken(good: Path) -> None:
    log = good / "events.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    lines[5] = lines[5].replace(b'"t":', b'"t": ', 1)  # same JSON, other bytes: line 7's 'prev' no longer fits
    log.write_bytes(b"".join(lines))
    report = verify(good)
    assert "integrity.chain" in failed(report)
    assert "line 7: hash chain broken" in checks(report)["integrity.chain"]["message"]
    assert report["integrity_ok"] is False and report["division"] == "open"


def test_truncated_last_line_fails_the_chain(good: Path) -> None:
    log = good / "events.jsonl"
    log.write_bytes(log.read_bytes()[:-10])
    report = verify(good)
    assert "truncated" in checks(report)["integrity.chain"]["message"]


def test_missing_log(good: Path) -> None:
    (good / "events.jsonl").unlink()
    report = verify(good)
    assert "integrity.chain" in failed(report)


@pytest.mark.parametrize(("mutate", "text"), [
    (lambda e: e.pop("images_evaluated"), "missing field 'images_evaluated'"),
    (lambda e: e.update(val_accuracy=1.5), "val_accuracy"),
    (lambda e: e.update(epoch=0), "epoch"),
    (lambda e: e.update(trial="x1"), "trial id"),
    (lambda e: e.update(type="epoch_done"), "unknown event type 'epoch_done'"),
])
def test_schema(good: Path, mutate: Callable[[dict[str, Any]], None], text: str) -> None:
    edit_events(good, mutate, "epoch_end", 3)
    report = verify(good)
    assert "integrity.schema" in failed(report)
    assert text in checks(report)["integrity.schema"]["message"]


def test_schema_enum_of_trial_proposed(good: Path) -> None:
    edit_events(good, lambda e: e.update(morphisms=["bigger"]), "trial_proposed", 2)
    assert "integrity.schema" in failed(verify(good))


def test_run_json_and_log_disagree(good: Path) -> None:
    edit_events(good, lambda e: e.update(run_id="cd" * 16), "run_started")
    report = verify(good)
    assert "integrity.run" in failed(report)
    assert "differs from run.json" in checks(report)["integrity.run"]["message"]


def test_run_json_missing_fields(good: Path) -> None:
    edit_run_json(good, lambda d: d.pop("dataset"))
    report = verify(good)
    assert "integrity.run" in failed(report)
    assert "dataset" in checks(report)["integrity.run"]["message"]


def test_unknown_spec_version(good: Path) -> None:
    edit_run_json(good, lambda d: d.update(spec_version="99"))
    report = verify(good)
    assert "integrity.versions" in failed(report)
    assert "'99' is not known" in checks(report)["integrity.versions"]["message"]


def test_graph_does_not_match_the_logged_hash(good: Path) -> None:
    (good / "trials" / "t0003" / "graph.json").write_text(small_graph(7, 224, 1000).dumps())
    report = verify(good)
    assert "integrity.graphs" in failed(report)
    assert "t0003" in checks(report)["integrity.graphs"]["message"]


def test_invalid_graph(good: Path) -> None:
    path = good / "trials" / "t0002" / "graph.json"
    data = json.loads(path.read_text())
    data["layers"][0]["params"]["in_channels"] = 5
    path.write_text(json.dumps(data))
    report = verify(good)
    assert "integrity.graphs" in failed(report)
    assert "in_channels" in checks(report)["integrity.graphs"]["message"]
    # its epochs are not counted
    assert report["epochs"] == 16 * 4 - 4


def test_missing_graph(good: Path) -> None:
    (good / "trials" / "t0001" / "graph.json").unlink()
    assert "missing" in checks(verify(good))["integrity.graphs"]["message"]


# ---- validity -----------------------------------------------------------------------------------

def test_other_presets_are_open_division(tmp_path: Path) -> None:
    report = verify(official(tmp_path / "run", preset="smoke"))
    assert failed(report) == {"validity.preset"}
    assert report["division"] == "open" and report["valid"] is False


def test_duration_under_an_hour(tmp_path: Path) -> None:
    report = verify(official(tmp_path / "run", trials=12))  # 3 trials per slot: ~50 minutes
    assert "validity.duration" in failed(report)
    assert checks(report)["validity.duration"]["measured"] < 3600


@pytest.mark.parametrize(("precision", "ok"), [("fp32", True), ("tf32", True), ("fp16", True), ("bf16", True),
                                                ("fp8", False), ("int8", False)])
def test_precision(tmp_path: Path, precision: str, ok: bool) -> None:
    report = verify(official(tmp_path / "run", precision=precision, declared_peak=1e15))
    assert ("validity.precision" not in failed(report)) is ok


def test_accuracy_below_70_percent(tmp_path: Path) -> None:
    report = verify(official(tmp_path / "run", accuracy=0.69))
    assert "validity.accuracy" in failed(report)
    assert checks(report)["validity.accuracy"]["measured"] == 0.69
    assert report["division"] == "open"


def test_partial_validation_set(tmp_path: Path) -> None:
    report = verify(official(tmp_path / "run", images_evaluated=lambda i, e: 49_000 if i == 5 and e == 2 else 50_000))
    assert "validity.full_validation" in failed(report)
    assert "evaluated 49000 images" in checks(report)["validity.full_validation"]["message"]


def test_imagenet_with_a_small_declared_validation_set(tmp_path: Path) -> None:
    ds = {"name": "imagenet", "train_images": 1_281_167, "val_images": 1000, "classes": 1000, "image_size": 224}
    report = verify(official(tmp_path / "run", dataset=ds))
    assert "validity.full_validation" in failed(report)
    assert "ImageNet-1k has 50000" in checks(report)["validity.full_validation"]["message"]


def test_unfinished_run(tmp_path: Path) -> None:
    report = verify(official(tmp_path / "run", finish=False))
    assert "validity.complete" in failed(report)


# ---- stability ----------------------------------------------------------------------------------

def test_unstable_score(tmp_path: Path) -> None:
    # One slot: trial 0 runs 10 quick epochs, trial 1 a single long one that ends with the run, so the
    # score falls by half over the second half of the run.
    run = make_run(tmp_path / "run", slots=1, trials=2, epochs=lambda i: 10 if i == 0 else 1,
                   epoch_seconds=lambda i, e: 10.0 if i == 0 else 200.0)
    report = verify(run.path)
    c = checks(report)["stability.score_cv"]
    assert not c["passed"] and c["measured"] > 0.10
    assert report["stable"] is False


def test_stability_needs_points() -> None:
    c = R.check_stability([{"t": 1.0, "score": 1.0}], R.thresholds())
    assert not c["passed"] and "points" in c["message"]
    c = R.check_stability([{"t": float(t), "score": 0.0} for t in range(1, 10)], R.thresholds())
    assert not c["passed"] and "score is 0" in c["message"]
    c = R.check_stability([{"t": float(t), "score": 5.0} for t in range(1, 10)], R.thresholds())
    assert c["passed"] and c["measured"] == 0.0


# ---- plausibility ---------------------------------------------------------------------------------

def test_declared_peak_far_above_the_table(tmp_path: Path) -> None:
    report = verify(official(tmp_path / "run", declared_peak=8 * H100_BF16 * 2))
    c = checks(report)["plausibility.declared_peak"]
    assert not c["passed"] and c["measured"] == pytest.approx(2.0)


def test_an_unknown_accelerator_waits_for_its_peak_whatever_it_declares(tmp_path: Path) -> None:
    path = official(tmp_path / "run", accelerator_model="Acme Tensor 9000", declared_peak=1e18)
    report = verify(path, system=registration_of(path, status="pending"))
    assert failed(report) == {"system.registered", "system.peak"}
    assert "not in the peak table" in checks(report)["system.peak"]["message"]
    assert checks(report)["plausibility.declared_peak"]["passed"]  # a note: it bounds nothing
    assert report["division"] == "open" and not report["rejected"] and report["peak_flops"] is None
    # once a list maintainer adds the model's peak, the registration carries it and the result is judged
    added = registration_of(path, peak_flops={"bf16": H100_BF16})
    again = verify(path, system=added)
    assert failed(again) == {"plausibility.declared_peak"} and again["rejected"]


def test_score_and_epochs_above_the_peak(tmp_path: Path) -> None:
    """Work an H100 system did, judged by a registration of one slow CPU core (rules 3.0 read its clock from
    its name; 3.1 holds a registration to the run's facts, tests/verify/test_system_facts.py)."""
    path = official(tmp_path / "run")
    report = verify(path, system=registration_of(path, accelerator_model="cpu", accelerators_per_node=0,
                                                 cpu_cores=1, cpu_model="Slow CPU @ 0.10GHz"), rules_version="3.0")
    assert {"plausibility.score_peak", "plausibility.epoch_rate"} <= failed(report)
    assert checks(report)["plausibility.score_peak"]["measured"] > 1 and report["rejected"]


def test_epoch_rate_uses_the_slots_share_of_the_peak(good: Path) -> None:
    """A slot of 2 of the 8 devices gets 2/8 of the system's peak; an epoch at twice that is caught."""
    events = [json.loads(x) for x in (good / "events.jsonl").read_text().splitlines()]
    epoch = [e for e in events if e["type"] == "epoch_end"][17]
    graph = Graph.from_json(json.loads((good / "trials" / epoch["trial"] / "graph.json").read_text()))
    counts = flops_per_image(graph)
    work = counts.train * epoch["images_trained"] + counts.eval * epoch["images_evaluated"]
    slot_peak = 8 * H100_BF16 * 2 / 8
    seconds = work / (2 * slot_peak)
    edit_events(good, lambda e: e.update(started_at=e["ended_at"] - seconds), "epoch_end", 17)
    report = verify(good)
    c = checks(report)["plausibility.epoch_rate"]
    assert not c["passed"]
    assert c["measured"] == pytest.approx(2.0, rel=1e-3)  # times are float seconds since 1970


def test_epoch_trains_more_images_than_the_dataset(tmp_path: Path) -> None:
    report = verify(official(tmp_path / "run", images_trained=lambda i, e: 10 * 1_281_167 if i == 3 else 1_281_167))
    assert "plausibility.epoch_images" in failed(report)


def test_slot_runs_two_trials_at_once(good: Path) -> None:
    # trial t0001 was started on slot 1 while t0000 runs on slot 0: move it to slot 0
    edit_events(good, lambda e: e.update(slot=0), "trial_started", 1)
    report = verify(good)
    assert "plausibility.slot_exclusive" in failed(report)
    assert "slot 0" in checks(report)["plausibility.slot_exclusive"]["message"]


def test_more_trials_than_slots(good: Path) -> None:
    edit_run_json(good, lambda d: d["config"].update(slots=3))
    edit_events(good, lambda e: e.update(slots=3), "run_started")
    report = verify(good)
    c = checks(report)["plausibility.concurrency"]
    assert not c["passed"] and c["measured"] == 4 and c["threshold"] == 3


@pytest.mark.parametrize(("mutate", "text"), [
    (lambda e: e.update(ended_at=e["t"] + 3600), "after the line recording it"),
    (lambda e: e.update(started_at=e["ended_at"] + 1), "before it starts"),
    (lambda e: e.update(started_at=e["started_at"] - 3600, ended_at=e["started_at"] - 3500),
     "before the trial started"),
])
def test_timestamps(good: Path, mutate: Callable[[dict[str, Any]], None], text: str) -> None:
    edit_events(good, mutate, "epoch_end", 9)
    report = verify(good)
    assert "plausibility.timestamps" in failed(report)
    assert text in checks(report)["plausibility.timestamps"]["message"]


def test_event_times_going_backwards(good: Path) -> None:
    edit_events(good, lambda e: e.update(t=e["t"] - 1000), "trial_finished", 2)
    assert "plausibility.timestamps" in failed(verify(good))


def test_epoch_gap(good: Path) -> None:
    edit_events(good, lambda e: e.update(epoch=3), "epoch_end", 1)
    report = verify(good)
    assert "plausibility.lifecycle" in failed(report)


def test_epoch_of_a_trial_never_started(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "run", slots=1)
    b.trial("t0000", 1.0)
    b.epoch("t0000", 1, started_at=2.0, ended_at=10.0, trained=100, evaluated=1000, accuracy=0.3)
    b.close(finish_t=20.0)
    report = verify(b.root)
    assert "never started" in checks(report)["plausibility.lifecycle"]["message"]


def test_retried_trials_pass_lifecycle(tmp_path: Path) -> None:
    report = verify(official(tmp_path / "run", retry_trials={1, 6}))
    assert failed(report) == set()


def test_resume_closes_the_running_attempts(tmp_path: Path) -> None:
    """After run_resumed, the killed controller's attempts may be closed and their epochs copied late."""
    b = RunBuilder(tmp_path / "run", slots=1)
    b.trial("t0000", 1.0)
    b.start_trial("t0000", 2.0)
    b.epoch("t0000", 1, started_at=2.0, ended_at=10.0, trained=100, evaluated=1000, accuracy=0.3)
    b.event("run_resumed", 30.0, run_id=b.run["run_id"])
    b.epoch("t0000", 2, started_at=10.0, ended_at=20.0, trained=100, evaluated=1000, accuracy=0.4, t=31.0)
    b.event("trial_failed", 32.0, trial="t0000", attempt=1, error="interrupted", retry=True)
    b.start_trial("t0000", 33.0, attempt=2)
    b.epoch("t0000", 3, attempt=2, started_at=33.0, ended_at=40.0, trained=100, evaluated=1000, accuracy=0.5)
    b.finish_trial("t0000", 41.0, epochs=3, best=0.5, attempt=2)
    b.close(finish_t=50.0)
    report = verify(b.root)
    assert not {n for n in failed(report) if n.startswith(("integrity", "plausibility"))}
    assert report["epochs"] == 3
