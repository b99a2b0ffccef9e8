"""TPE hyper-parameter search: bounds, sources by round, results paired by trial id, rebuild."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("optuna")

from aiperf_runner.search.hparams import KERNEL_SIZE, SPACES, HparamSearch, defaults  # noqa: E402


def test_sources_by_round_and_bounds():
    h = HparamSearch("smoke", seed=0, n_startup_trials=2)
    space = SPACES["smoke"]
    sources = {}
    for seq in range(16):
        tid = f"t{seq:04d}"
        parent = None if seq == 0 else f"t{(seq - 1) // 2:04d}"
        hp, src = h.suggest(tid, parent, seq // 2)
        sources[tid] = (seq // 2, src)
        assert space.contains(hp), hp
        assert hp["kernel_size"] == KERNEL_SIZE
        assert isinstance(hp["batch_size"], int)
        if src == "seed":
            assert hp == defaults("smoke")
        if src == "inherited":
            assert hp == h.hparams(parent)
        assert h.tell(tid, 0.5 + 0.01 * seq)
    assert sources["t0000"] == (0, "seed")
    assert all(src == "inherited" for r, src in sources.values() if 0 < r < 3 and src != "seed")
    assert {src for r, src in sources.values() if r >= 3} >= {"tpe"}  # TPE from round 3 on
    assert {src for r, src in sources.values() if r == 3} == {"tpe"}
    assert len(h.study.trials) == 16  # every result taught TPE, whatever its source


def test_tell_pairs_by_trial_id():
    h = HparamSearch("smoke", seed=1, n_startup_trials=1)
    points = {}
    for seq in range(4):
        points[f"t{seq}"] = h.suggest(f"t{seq}", None, 3)[0]  # round 3, no parent: TPE
    h.tell("t2", 0.9)  # out of order
    h.tell("t0", 0.1)
    assert not h.tell("t0", 0.2)  # told once
    assert not h.tell("unknown", 0.5)
    assert h.tell("t1", None)  # a failed trial
    tid, hp, acc = h.best()
    assert (tid, acc) == ("t2", 0.9) and hp == points["t2"]
    by_value = {t.value: t.params for t in h.study.trials if t.value is not None}
    assert by_value[0.9]["lr"] == points["t2"]["lr"] and by_value[0.1]["lr"] == points["t0"]["lr"]


def test_parent_may_be_a_trial_state_object():
    h = HparamSearch("cifar", rng_seed=3)
    parent = SimpleNamespace(trial="t0007", hparams={**defaults("cifar"), "lr": 0.2})
    hp, src = h.suggest("t0010", parent, 1)
    assert src == "inherited" and hp["lr"] == 0.2


def test_rebuild_from_history():
    records = [
        {"trial": "t0000", "hparams": defaults("smoke"), "accuracy": 0.6, "hparam_source": "seed"},
        {"trial": "t0001", "hparams": {**defaults("smoke"), "lr": 0.02}, "accuracy": 0.7, "hparam_source": "tpe"},
        ("t0002", defaults("smoke"), None, "inherited"),
    ]
    h = HparamSearch.from_history(records, preset="smoke", rng_seed=0)
    assert h.source("t0001") == "tpe" and h.hparams("t0001")["lr"] == 0.02
    assert len([t for t in h.study.trials if t.value is not None]) == 2
    hp, src = h.suggest("t0003", "t0001", 2)
    assert src == "inherited" and hp["lr"] == 0.02
    assert h.tell("t0002", 0.65)


def test_unknown_preset():
    with pytest.raises(ValueError):
        HparamSearch("mnist")


def test_smoke_searches_no_batch_size_but_old_runs_stay_inside_the_spec():
    from aiperf_runner.spec.presetfacts import PRESETS as SPEC
    h = HparamSearch("smoke", seed=2, n_startup_trials=1)
    sizes = {h.suggest(f"t{seq}", None, 3)[0]["batch_size"] for seq in range(12)}  # round 3, no parent: TPE
    assert sizes == {defaults("smoke")["batch_size"]} == {32}
    # What verification allows is the spec's: runs that searched 64 and 128 still verify, and resume.
    assert not SPEC["smoke"].space.problems({**defaults("smoke"), "batch_size": 128})
    old = HparamSearch.from_history([("t0", {**defaults("smoke"), "batch_size": 128}, 0.9, "tpe")],
                                    preset="smoke", n_startup_trials=1)
    assert old.suggest("t1", None, 3)[0]["batch_size"] == 32
    assert HparamSearch("fashion-mnist").space.batch_sizes == (64, 128, 256)
