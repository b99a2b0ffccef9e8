"""Work, score and regulated score on tiny runs whose numbers are computed here by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from aiperf_runner.spec import scoring
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.graph import Graph
from aiperf_runner.spec.scoring import score_run

from devdata.runfactory import RunBuilder, small_graph

# Per-image FLOPs injected for the hand-computed runs: train 3, eval 1 (t0000) and 5, 2 (t0001).
STUB = {"t0000": (3.0, 1.0), "t0001": (5.0, 2.0)}


def stub_flops(trial: str) -> tuple[float, float] | None:
    return STUB.get(trial)


def two_trial_run(root: Path, rules: str = "v2", finish: float | None = 100.0) -> RunBuilder:
    """run_started at 0; t0000 on slot 0 from 10, t0001 on slot 1 from 20 (times after the start).

    epochs (ended_at, trained, evaluated, accuracy):
      t0000 e1 (30, 100, 10, 0.50)   t0000 e2 (50, 100, 10, 0.75)   t0001 e1 (40, 200, 20, 0.60)
    """
    b = RunBuilder(root, slots=2, rules=rules)
    b.trial("t0000", 9.0)
    b.start_trial("t0000", 10.0, slot=0)
    b.trial("t0001", 19.0)
    b.start_trial("t0001", 20.0, slot=1)
    b.epoch("t0000", 1, started_at=10.5, ended_at=30.0, trained=100, evaluated=10, accuracy=0.5)
    b.epoch("t0001", 1, started_at=20.5, ended_at=40.0, trained=200, evaluated=20, accuracy=0.6)
    b.epoch("t0000", 2, started_at=30.0, ended_at=50.0, trained=100, evaluated=10, accuracy=0.75)
    b.finish_trial("t0000", 51.0, epochs=2, best=0.75)
    b.finish_trial("t0001", 52.0, epochs=1, best=0.6)
    b.close(finish_t=finish)
    return b


def point_at(series: scoring.Series, t: float) -> dict[str, float]:
    [p] = [p for p in series.points if abs(p["t"] - t) < 1e-9]
    return p


def test_v2_work_score_and_regulated_score_by_hand(tmp_path: Path) -> None:
    b = two_trial_run(tmp_path / "run")
    s = score_run(b.root, flops_for=stub_flops)
    w_e1 = 3 * 100 + 1 * 10        # t0000 epoch 1
    w_f1 = 5 * 200 + 2 * 20        # t0001 epoch 1
    w_e2 = 3 * 100 + 1 * 10        # t0000 epoch 2
    total = w_e1 + w_f1 + w_e2
    assert s.t0 == b.start                       # v2: the run_started event
    assert s.duration_s == 100.0
    assert s.work == total
    assert s.score == pytest.approx(total / 100.0, rel=1e-12)
    assert s.max_accuracy == 0.75
    assert s.regulated == pytest.approx(total / 100.0 * abs(math.log(1 - 0.75)), rel=1e-12)
    assert s.epochs == 3
    # The grid: 100 s -> 0.5 s steps (at most 200 points), the last point at the run's end.
    assert s.step == 0.5
    assert len(s.points) == 200
    assert s.points[-1]["t"] == 100.0
    # An epoch counts from its ended_at on (inclusive), not before.
    assert point_at(s, 29.5)["work"] == 0
    assert point_at(s, 30.0)["work"] == w_e1
    assert point_at(s, 35.0)["score"] == pytest.approx(w_e1 / 35.0)
    assert point_at(s, 35.0)["max_accuracy"] == 0.5
    assert point_at(s, 35.0)["regulated"] == pytest.approx(w_e1 / 35.0 * math.log(2))
    assert point_at(s, 45.0)["work"] == w_e1 + w_f1
    assert point_at(s, 45.0)["max_accuracy"] == 0.6
    assert point_at(s, 50.0)["work"] == total


def test_v1_compat_uses_first_trial_start_and_fixed_image_counts(tmp_path: Path) -> None:
    b = two_trial_run(tmp_path / "run", rules="v1-compat")
    s = score_run(b.root, flops_for=stub_flops)
    per_epoch_t0 = 3 * 1_280_000 + 1 * 50_000
    per_epoch_t1 = 5 * 1_280_000 + 2 * 50_000
    assert s.rules == "v1-compat"
    assert s.t0 == b.start + 10.0               # first trial_started, not run_started
    assert s.duration_s == 90.0
    assert s.work == 2 * per_epoch_t0 + per_epoch_t1
    assert s.score == pytest.approx((2 * per_epoch_t0 + per_epoch_t1) / 90.0, rel=1e-12)
    # series t is measured from t0: t0000's first epoch ends 20 s after t0
    assert point_at(s, 20.0)["work"] == per_epoch_t0


def test_rules_argument_overrides_the_runs_own(tmp_path: Path) -> None:
    b = two_trial_run(tmp_path / "run", rules="v2")
    assert score_run(b.root, rules="v1-compat", flops_for=stub_flops).t0 == b.start + 10.0


def test_real_flops_from_the_trial_graph(tmp_path: Path) -> None:
    graph = small_graph(3)
    b = RunBuilder(tmp_path / "run", slots=1)
    b.trial("t0000", 1.0, graph=graph)
    b.start_trial("t0000", 2.0)
    b.epoch("t0000", 1, started_at=2.0, ended_at=12.0, trained=4000, evaluated=1000, accuracy=0.5)
    b.finish_trial("t0000", 13.0, epochs=1, best=0.5)
    b.close(finish_t=20.0)
    counts = flops_per_image(Graph.from_json(graph.to_json()))
    s = score_run(b.root)
    assert s.work == counts.train * 4000 + counts.eval * 1000
    assert s.score == pytest.approx((counts.train * 4000 + counts.eval * 1000) / 20.0)


def deep_graph(blocks: int) -> Graph:
    """small_graph with `blocks` residual blocks: 3 + 4 x blocks + 3 layers."""
    return small_graph(8 * blocks)


def test_v1_compat_kernel_size_comes_from_the_trial_hparams(tmp_path: Path) -> None:
    graph = deep_graph(45)  # 186 layers: convs past position 175 get the v1 kernel-size quirk
    assert len(graph.layers) > 176
    with_ks5 = flops_per_image(graph, rules="v1-compat", kernel_size=5)
    with_ks3 = flops_per_image(graph, rules="v1-compat", kernel_size=3)
    assert with_ks5.train != with_ks3.train  # the quirk matters for this graph
    b = RunBuilder(tmp_path / "run", slots=1, rules="v1-compat")
    b.trial("t0000", 1.0, graph=graph, hparams={"lr": 0.1, "kernel_size": 5})
    b.start_trial("t0000", 2.0)
    b.epoch("t0000", 1, started_at=2.0, ended_at=12.0, trained=10, evaluated=10, accuracy=0.5)
    b.finish_trial("t0000", 13.0, epochs=1, best=0.5)
    b.close(finish_t=22.0)
    s = score_run(b.root)
    assert s.work == with_ks5.train * 1_280_000 + with_ks5.eval * 50_000
    assert s.score == pytest.approx(s.work / 20.0)


def test_a_repeated_epoch_is_counted_once(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "run", slots=1)
    b.trial("t0000", 1.0)
    b.start_trial("t0000", 2.0)
    b.epoch("t0000", 1, started_at=2.0, ended_at=10.0, trained=100, evaluated=10, accuracy=0.4)
    b.event("trial_failed", 11.0, trial="t0000", attempt=1, error="lost", retry=True)
    b.start_trial("t0000", 12.0, attempt=2)
    # attempt 2 had no checkpoint and re-ran epoch 1, then ran epoch 2
    b.epoch("t0000", 1, attempt=2, started_at=12.0, ended_at=20.0, trained=100, evaluated=10, accuracy=0.9)
    b.epoch("t0000", 2, attempt=2, started_at=20.0, ended_at=30.0, trained=100, evaluated=10, accuracy=0.5)
    b.finish_trial("t0000", 31.0, epochs=2, best=0.5, attempt=2)
    b.close(finish_t=40.0)
    s = score_run(b.root, flops_for=stub_flops)
    assert s.epochs == 2
    assert s.work == 2 * (3 * 100 + 10)
    assert s.max_accuracy == 0.5  # the repeated epoch's accuracy is not counted either


def test_epochs_ending_after_the_run_are_not_counted(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "run", slots=1)
    b.trial("t0000", 1.0)
    b.start_trial("t0000", 2.0)
    b.epoch("t0000", 1, started_at=2.0, ended_at=10.0, trained=100, evaluated=10, accuracy=0.4)
    b.epoch("t0000", 2, started_at=10.0, ended_at=60.0, trained=100, evaluated=10, accuracy=0.8, t=30.0)
    b.close(finish_t=50.0)
    s = score_run(b.root, flops_for=stub_flops)
    assert s.work == 310
    assert s.max_accuracy == 0.4


def test_unfinished_run_ends_at_its_last_event(tmp_path: Path) -> None:
    b = two_trial_run(tmp_path / "run", finish=None)
    s = score_run(b.root, flops_for=stub_flops)
    assert s.end == b.start + 52.0
    assert s.score == pytest.approx(s.work / 52.0)


def test_no_epochs_scores_zero(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "run", slots=1)
    b.close(finish_t=10.0)
    s = score_run(b.root, flops_for=stub_flops)
    assert s.score == 0.0 and s.regulated == 0.0 and s.max_accuracy == 0.0
    assert s.points[-1]["t"] == 10.0


# ---- the pieces ----------------------------------------------------------------------------------

def test_epoch_work() -> None:
    assert scoring.epoch_work(7, 2, 11, 13, "v2") == 7 * 11 + 2 * 13
    assert scoring.epoch_work(7, 2, 11, 13, "v1-compat") == 7 * 1_280_000 + 2 * 50_000


def test_accuracy_factor_and_guard() -> None:
    assert scoring.accuracy_factor(0.5) == pytest.approx(math.log(2))
    assert scoring.accuracy_factor(0.0) == 0.0
    assert scoring.accuracy_factor(0.9) == pytest.approx(math.log(10))
    assert scoring.accuracy_factor(1.0) == pytest.approx(-math.log(1e-6), rel=1e-6)  # finite
    assert scoring.regulated_score(10.0, 0.75) == pytest.approx(10 * math.log(4))


@pytest.mark.parametrize(("duration", "step"), [
    (3600.0, 360.0), (43200.0, 360.0), (100 * 3600.0, 360.0),
    (300.0, 2.0), (3599.0, 30.0), (20.0, 0.1), (100.0, 0.5), (1000.0, 5.0),
])
def test_grid_step(duration: float, step: float) -> None:
    assert scoring.grid_step(duration) == step
    ts = scoring.grid(duration)
    assert ts[-1] == duration
    assert all(b > a for a, b in zip(ts, ts[1:], strict=False))
    if duration < 3600:
        assert len(ts) <= scoring.MAX_POINTS + 1
    else:
        assert ts[0] == 360.0 and ts[1] == 720.0


def test_official_grid_of_a_12_hour_run_has_120_points() -> None:
    ts = scoring.grid(12 * 3600.0)
    assert len(ts) == 120
    assert ts[9] == 3600.0


def test_coefficient_of_variation() -> None:
    assert scoring.coefficient_of_variation([2.0, 2.0, 2.0]) == 0.0
    # values 1 and 3: mean 2, population std 1
    assert scoring.coefficient_of_variation([1.0, 3.0]) == pytest.approx(0.5)
    assert scoring.coefficient_of_variation([1.0]) is None
    assert scoring.coefficient_of_variation([0.0, 0.0]) is None


def test_unknown_rules_rejected(tmp_path: Path) -> None:
    b = two_trial_run(tmp_path / "run")
    with pytest.raises(ValueError, match="unknown rules"):
        score_run(b.root, rules="v3")
