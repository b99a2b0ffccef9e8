"""Each forgery of tests/forgeries.py, verified against the honest run's registration, fails its named
check and ends rejected or outside the official division; the honest run passes every check."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiperf_runner.spec.verify import verify as spec_verify

from devdata.runfactory import TestWitness
from tests.forgeries import FORGERIES, Forgery, forged_copy, honest, honest_registration

WITNESS = TestWitness()


@pytest.fixture(scope="module")
def honest_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return honest(tmp_path_factory.mktemp("honest") / "run", WITNESS)


def verify(path: Path, **kw: object) -> dict:
    return spec_verify(path, witness_keys=WITNESS.keys, **kw)  # type: ignore[arg-type]


def failed(report: dict) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["passed"]}


def test_the_honest_run_is_official(honest_run: Path) -> None:
    report = verify(honest_run, system=honest_registration(honest_run))
    assert failed(report) == set()
    assert report["division"] == "official" and not report["rejected"]
    assert report["efficiency"] == pytest.approx(report["score_ops"] / report["peak_flops"])


@pytest.mark.parametrize("forgery", [f for f in FORGERIES if not f.service_only], ids=lambda f: f.name)
def test_each_forgery_is_caught(forgery: Forgery, honest_run: Path, tmp_path: Path) -> None:
    forged = forged_copy(honest_run, forgery, tmp_path / forgery.name, WITNESS)
    report = verify(forged, system=honest_registration(honest_run, **forgery.registration))
    assert forgery.check in failed(report), failed(report)
    assert report["division"] == "open"
    assert report["rejected"] is (forgery.outcome == "rejected")


def test_a_copy_with_a_new_run_id_has_the_same_epoch_fingerprints(honest_run: Path, tmp_path: Path) -> None:
    copy = next(f for f in FORGERIES if f.check == "integrity.duplicate")
    forged = forged_copy(honest_run, copy, tmp_path / "copy")
    a = verify(honest_run, system=honest_registration(honest_run))["epoch_fingerprints"]
    b = verify(forged, system=honest_registration(honest_run))
    assert b["run_id"] != verify(honest_run)["run_id"]
    assert a and b["epoch_fingerprints"] == a


def test_v1_compat_is_verified_but_never_official(tmp_path: Path) -> None:
    from devdata.runfactory import make_run
    run = make_run(tmp_path / "run", preset="imagenet", slots=8, trials=32, epochs=4, epoch_seconds=250.0,
                   precision="bf16", accelerator_model="NVIDIA H100 80GB HBM3", accelerator_count=8,
                   rules="v1-compat", witness=WITNESS)
    report = verify(run.path, system=honest_registration(run.path))
    assert failed(report) == {"validity.rules"}
    assert report["division"] == "open" and report["rules"] == "v1-compat"


def test_a_kernel_larger_than_its_input_makes_the_graph_invalid_under_v1_compat() -> None:
    from aiperf_runner.spec.flops import flops_per_image
    from aiperf_runner.spec.graph import GraphError

    from devdata.runfactory import small_graph

    g = small_graph(8 * 200, image_size=16)  # > 175 layers: the v1-compat quirk applies to the late convs
    with pytest.raises(GraphError, match="smaller than 1x1"):
        flops_per_image(g, rules="v1-compat", kernel_size=64)
