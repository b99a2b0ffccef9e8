"""TPE's bounded window (which results the sampler sees) and the proposer that asks ahead."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("optuna")

from aiperf_runner.search.hparams import SPACES, HparamSearch  # noqa: E402
from aiperf_runner.search.tpewindow import Result, TpeProposer, window  # noqa: E402


def _results(values: list[float]) -> list[Result]:
    return [Result(f"k{i}", {"i": i}, v) for i, v in enumerate(values)]


def test_window_is_the_recent_and_the_best_older_in_told_order():
    hist = _results([0.5, 0.9, 0.1, 0.9, 0.3, 0.2, 0.8, 0.4])
    keys = [r.key for r in window(hist, recent=3, best=2)]
    # recent: k5 k6 k7; best of k0..k4: the two 0.9s (k1, k3), in told order
    assert keys == ["k1", "k3", "k5", "k6", "k7"]
    # equal values: the earlier is kept
    assert [r.key for r in window(_results([0.7, 0.7, 0.7, 0.1]), recent=1, best=1)] == ["k0", "k3"]
    # a short history is all of it
    assert window(hist[:4], recent=3, best=2) == hist[:4]
    assert window(hist, recent=0, best=0) == []


def _drive(search: HparamSearch, n: int) -> list[dict]:
    """n TPE trials (round 3, no parent), each told at once with a value that peaks at lr 0.05."""
    points = []
    for i in range(n):
        hp, src = search.suggest(f"t{i}", None, 3)
        assert src == "tpe" and SPACES["smoke"].contains(hp)
        points.append(hp)
        search.tell(f"t{i}", 1.0 - abs(hp["lr"] - 0.05) - (0.5 if i == 7 else 0.0) + (0.3 if i == 3 else 0.0))
    return points


def test_the_study_stays_bounded_keeps_the_best_and_is_deterministic():
    kwargs = {"preset": "smoke", "seed": 5, "n_startup_trials": 2, "history_recent": 6, "history_best": 2,
              "history_rebuild_every": 4}
    a, b = HparamSearch(**kwargs), HparamSearch(**kwargs)
    pa, pb = _drive(a, 40), _drive(b, 40)
    assert pa == pb  # same seed, same asks and tells: same points, through the window's rebuilds
    assert a.tpe.builds > 1
    completed = [t for t in a.study.trials if t.value is not None]
    assert 6 + 2 <= len(completed) <= 6 + 2 + 4
    assert len(a.tpe.history) == 40  # the whole history is kept; only the sampler's view is bounded
    best = max(a.tpe.history, key=lambda r: r.value)
    assert best.params in [t.params for t in completed]  # the best result stays in view
    other = HparamSearch(**{**kwargs, "seed": 6})
    assert _drive(other, 40) != pa


def test_points_asked_but_not_told_are_carried_up_to_liars():
    p = TpeProposer(SPACES["smoke"].distributions(), seed=0, n_startup_trials=1, recent=2, best=1,
                    rebuild_every=1, liars=2)
    open_keys = [p.take_or_ask()[0] for _ in range(5)]  # five asked, none told yet
    for i in range(5):  # results of points that were not asked: the window is built again
        p.add(_point(i), 0.1 * i)
    running = [t for t in p.study.trials if t.state.name == "RUNNING"]
    assert len(running) == 2  # the two most recently asked are carried
    assert {t.params["lr"] for t in running} == {p._open[k][0]["lr"] for k in open_keys[-2:]}
    last = p._open[open_keys[-1]][0]
    p.tell(open_keys[-1], 0.42)  # carried: its RUNNING trial in the new study is the one told
    assert [t.state.name for t in p.study.trials if t.params == last] == ["COMPLETE"]
    assert [t.value for t in p.study.trials if t.params == last] == [0.42]
    p.tell(open_keys[0], 0.99)  # not carried: its result joins as a completed point
    assert p.history[-1].key == open_keys[0] and p.history[-1].value == 0.99
    assert 0.99 in [t.value for t in p.study.trials]


def _point(i: int) -> dict:
    s = SPACES["smoke"]
    return {"batch_size": s.batch_sizes[0], "lr": s.lr[0] * (1 + i), "weight_decay": s.weight_decay[0],
            "label_smoothing": s.label_smoothing[0], "dropout": s.dropout[0]}


def test_fill_is_deterministic_given_the_seed():
    def run() -> list[dict]:
        p = TpeProposer(SPACES["smoke"].distributions(), seed=11, n_startup_trials=2, recent=4, best=1,
                        rebuild_every=2)
        out = []
        for turn in range(6):
            p.fill(3)
            for _ in range(3):
                key, params = p.take()  # type: ignore[misc]
                out.append(params)
                p.tell(key, params["dropout"] + 0.01 * turn)
        return out
    assert run() == run()


def test_the_proposer_thread_keeps_points_ready_and_applies_results():
    h = HparamSearch("smoke", seed=2, n_startup_trials=2)
    h.start(4)
    try:
        deadline = time.monotonic() + 30
        while h.tpe.ready < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert h.tpe.ready == 4
        asks = h.tpe.asks
        hp, src = h.suggest("t0", None, 3)  # taken, not asked in this thread
        assert src == "tpe" and SPACES["smoke"].contains(hp)
        assert h.tell("t0", 0.7)
        while (len(h.tpe.history) < 1 or h.tpe.ready < 4) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert h.tpe.history[-1].value == 0.7  # applied by the thread
        assert h.tpe.asks == asks + 1  # the refill of the one taken
    finally:
        h.stop()


def test_a_tpe_round_trial_inherits_when_no_point_is_ready():
    h = HparamSearch("smoke", seed=3, n_startup_trials=1)
    h.suggest("t0", None, 0)  # the seed point: a parent to inherit from
    h.start(2)
    deadline = time.monotonic() + 30
    while h.tpe.ready < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    h.stop()  # no refills from now on: two points are ready
    sources = [h.suggest(f"t{i}", "t0", 3)[1] for i in range(1, 4)]
    assert sources == ["tpe", "tpe", "inherited"] and h.fallbacks == 1
    assert h.hparams("t3") == h.hparams("t0")
    hp, src = h.suggest("t4", None, 3)  # no parent to inherit from: asked in this thread
    assert src == "tpe" and SPACES["smoke"].contains(hp)
