"""verify() on run directories and bundles made by devdata/runfactory.py, and the report's shape."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from aiperf_runner.spec import SPEC_VERSION, bundle, keys, seeds
from aiperf_runner.spec import rules as R
from aiperf_runner.spec.eventlog import iter_events
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.graph import Graph
from aiperf_runner.spec.scoring import score_run
from aiperf_runner.spec.verify import REPORT_FIELDS, verify

from devdata.runfactory import make_run, small_graph

# docs/internals.md, "Verification"
FIELDS = {"integrity_ok", "rules", "score_ops", "regulated_score_ops", "max_accuracy", "duration_s",
          "trials_finished", "epochs", "checks", "run_id", "fingerprint", "division", "series", "valid",
          "stable", "plausible", "spec_version", "rules_version", "rejected", "peak_flops", "efficiency", "system",
          "epoch_fingerprints", "kept_weights", "best_trial"}


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run", slots=3, trials=12, epochs=5, retry_trials={4}).path


def test_report_fields(run: Path) -> None:
    report = verify(run)
    assert set(report) == FIELDS == set(REPORT_FIELDS)
    json.dumps(report, allow_nan=False)  # plain JSON
    assert report["rules"] == "v2" and report["rules_version"] == R.RULES_VERSION == "3.1" and report["spec_version"] == SPEC_VERSION == "2"
    assert report["run_id"] == json.loads((run / "run.json").read_text())["run_id"]
    assert report["trials_finished"] == 12 and report["epochs"] == 60
    assert report["fingerprint"] is None
    for p in report["series"]:
        assert set(p) == {"t", "work", "score", "regulated", "max_accuracy"}
    assert report["series"][-1]["score"] == report["score_ops"]
    assert report["series"][-1]["t"] == report["duration_s"]


def test_score_is_recomputed_from_the_graphs(run: Path) -> None:
    """The final score equals a sum computed here from graph.json files and the logged image counts."""
    work = 0
    events = [e.data for e in iter_events(run / "events.jsonl")]
    flops: dict[str, tuple[int, int]] = {}
    for e in events:
        if e["type"] == "epoch_end":
            if e["trial"] not in flops:
                g = Graph.from_json(json.loads((run / "trials" / e["trial"] / "graph.json").read_text()))
                c = flops_per_image(g)
                flops[e["trial"]] = (c.train, c.eval)
            tr, ev = flops[e["trial"]]
            work += tr * e["images_trained"] + ev * e["images_evaluated"]
    duration = events[-1]["t"] - events[0]["t"]
    report = verify(run)
    assert report["series"][-1]["work"] == pytest.approx(work, rel=1e-12)
    assert report["score_ops"] == pytest.approx(work / duration, rel=1e-12)
    best = max(e["val_accuracy"] for e in events if e["type"] == "epoch_end")
    assert report["max_accuracy"] == best
    assert report["regulated_score_ops"] == pytest.approx(work / duration * abs(math.log(1 - best)), rel=1e-12)
    assert report["score_ops"] == score_run(run).score


def test_runner_flop_numbers_are_ignored(run: Path) -> None:
    """FLOP numbers the runner might write into the log are not read."""
    before = verify(run)["score_ops"]
    text = (run / "events.jsonl").read_text()
    assert "flops" not in text  # nothing to trust in the first place
    assert before == score_run(run).score


def test_rules_override(run: Path) -> None:
    v2 = verify(run)
    v1 = verify(run, rules="v1-compat")
    assert v1["rules"] == "v1-compat" and v1["score_ops"] != v2["score_ops"]
    assert v1["duration_s"] < v2["duration_s"]  # t0 = first trial start
    with pytest.raises(ValueError):
        verify(run, rules="v3")


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        verify(tmp_path / "nope")


def test_a_run_dir_without_run_json(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    report = verify(tmp_path / "empty")
    assert report["integrity_ok"] is False
    assert "run.json missing" in {c["name"]: c for c in report["checks"]}["integrity.run"]["message"]


def test_signed_bundle(run: Path, tmp_path: Path) -> None:
    key = keys.generate_key()
    out = bundle.pack(run, tmp_path / "run.tar.gz", key)
    report = verify(out, pubkey=key.public_key(), require_signature=True)
    assert report["integrity_ok"] is True
    assert report["fingerprint"] == keys.fingerprint(key)
    signature = {c["name"]: c for c in report["checks"]}["integrity.signature"]
    assert signature["passed"] and signature["measured"] == keys.fingerprint(key)
    # the same numbers as the directory
    assert report["score_ops"] == verify(run)["score_ops"]
    # another key is an integrity failure
    other = keys.generate_key()
    bad = verify(out, pubkey=other.public_key())
    assert bad["integrity_ok"] is False
    assert not {c["name"]: c for c in bad["checks"]}["integrity.signature"]["passed"]


def test_unsigned_run_with_and_without_requirement(run: Path) -> None:
    assert verify(run)["integrity_ok"] is True
    report = verify(run, require_signature=True)
    assert report["integrity_ok"] is False
    c = {c["name"]: c for c in report["checks"]}["integrity.signature"]
    assert c["measured"] == "not signed" and not c["passed"]


def test_not_a_bundle(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar")
    report = verify(junk)
    assert report["integrity_ok"] is False
    assert report["checks"][0]["name"] == "integrity.bundle"
    assert set(report) == FIELDS


def test_many_trials_share_cached_architectures(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", slots=8, trials=400, epochs=2, epoch_seconds=5.0, archs=5, trial_logs=False)
    report = verify(run.path)
    assert report["integrity_ok"] and report["epochs"] == 800
    assert "5 distinct files" in {c["name"]: c for c in report["checks"]}["integrity.graphs"]["message"]


def test_runfactory_output_follows_the_contract(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", slots=2, trials=5, epochs=3, retry_trials={2})
    events = [e.data for e in iter_events(run.path / "events.jsonl")]
    proposed = [e["trial"] for e in events if e["type"] == "trial_proposed"]
    assert proposed == [f"t{i:04d}" for i in range(5)]  # ids in proposal order
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)
    for tid in proposed:
        d = run.path / "trials" / tid
        assert {p.name for p in d.iterdir()} >= {"graph.json", "hparams.json", "trial.json", "events.jsonl",
                                                  "stdout.log", "stderr.log"}
        trial_events = [e.data for e in iter_events(d / "events.jsonl")]
        assert trial_events[-1]["type"] == "trial_result"
    assert run.epochs == sum(e["type"] == "epoch_end" for e in events) == 15
    assert run.trials == 5 and run.events == len(events)


def test_parallel_graph_analysis_gives_the_same_report(tmp_path: Path) -> None:
    # 70 distinct graphs (more than PREFETCH_MIN_DISTINCT), each within smoke's search bounds (integrity.bound)
    bounds = seeds.search_bounds("smoke", seeds.seed_for_preset("smoke", 10, 16))
    kinds = [k for k in range(400) if seeds.within_bounds(small_graph(k), **bounds)][:70]
    run = make_run(tmp_path / "run", slots=4, trials=80, epochs=2, epoch_seconds=5.0, archs=70, trial_logs=False,
                   graph_fn=lambda k: small_graph(kinds[k]))
    lazy = verify(run.path, workers=1)
    parallel = verify(run.path, workers=2)
    assert lazy == parallel
    assert lazy["integrity_ok"] and lazy["epochs"] == 160
    v1_lazy, v1_parallel = verify(run.path, rules="v1-compat", workers=1), verify(run.path, rules="v1-compat", workers=2)
    assert v1_lazy == v1_parallel


def test_prefetch_analyses_each_distinct_graph_once(tmp_path: Path) -> None:
    from aiperf_runner.spec.runio import RunDir

    run = make_run(tmp_path / "run", slots=2, trials=20, epochs=1, archs=10, trial_logs=False)
    rd = RunDir(run.path)
    assert rd.prefetch("v2", workers=2, min_distinct=1) == 10
    assert rd.distinct_architectures == 10
    assert RunDir(run.path).prefetch("v2", workers=2) == 0  # below the default threshold: stays lazy


def test_trial_ids_from_the_log_never_name_other_paths(tmp_path: Path) -> None:
    from aiperf_runner.spec.runio import RunDir, RunIOError

    from devdata.runfactory import rewrite_events

    run = make_run(tmp_path / "run", slots=1, trials=2, epochs=2).path
    (tmp_path / "graph.json").write_text((run / "trials" / "t0000" / "graph.json").read_text())

    def edit(events: list[dict]) -> list[dict]:
        for e in events:
            if e.get("trial") == "t0001":
                e["trial"] = "../.."
        return events

    rewrite_events(run, edit)
    report = verify(run)
    assert report["integrity_ok"] is False
    assert report["epochs"] == 2  # only t0000's: "../.." is never opened
    for bad in ("../..", "t0000/..", "t0000\n", "/etc", "t12"):
        with pytest.raises(RunIOError):
            RunDir(run).trial_dir(bad)
