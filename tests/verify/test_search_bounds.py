"""`integrity.bound` holds every trial's graph to the search's bounds (spec/seeds.py, spec/presetfacts.py):
the runner's own search never proposes past them, so a graph past them was not proposed by it."""

from __future__ import annotations

from pathlib import Path

from aiperf_runner.spec import seeds
from aiperf_runner.spec.verify import verify

from devdata.runfactory import make_run, small_graph


def bound(report: dict) -> dict:
    return next(c for c in report["checks"] if c["name"] == "integrity.bound")


def test_the_runners_own_bounds_are_the_verifiers(tmp_path: Path) -> None:
    seed = seeds.seed_for_preset("smoke", 10, 16)
    limits = seeds.search_bounds("smoke", seed)
    assert limits == {"max_train_flops": 2 * seeds.flops_per_image(seed, "v2").train // 1, "max_layers": 45}
    ok = verify(make_run(tmp_path / "ok", trials=4).path)
    assert bound(ok)["passed"], bound(ok)["message"]


def test_a_graph_with_more_layers_than_the_search_allows_is_rejected(tmp_path: Path) -> None:
    deep = small_graph(88)  # 6 + 4 x 11 = 50 layers, tiny FLOPs; smoke's search stops at 45
    assert len(deep.layers) == 50
    run = make_run(tmp_path / "deep", trials=4, graph_fn=lambda i: deep if i == 2 else small_graph(i)).path
    report = verify(run)
    assert not bound(report)["passed"] and report["rejected"] and not report["integrity_ok"]
    assert "trials/t0002/graph.json has 50 layers; the search of preset 'smoke' proposes at most 45" in \
        bound(report)["message"]
