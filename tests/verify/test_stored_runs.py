"""Every result ever accepted re-verifies forever: one real stored run per released spec and rules version
(tests/fixtures/runs/, each made by the runner of its time: make_fixture.py) verifies with today's code to the
figures that runner's own verifier printed. A released version without its stored run fails here."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.spec import SPEC_VERSION, SPEC_VERSIONS
from aiperf_runner.spec import rules as R
from aiperf_runner.spec.verify import verify

STORED = Path(__file__).parents[1] / "fixtures" / "runs"
RUNS = sorted(p.name for p in STORED.iterdir() if (p / "expected.json").exists())
# What each check's threshold may gain since: later spec versions admitted by the same rules version.
WIDENS = {"integrity.versions": "spec"}


def _expected(name: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((STORED / name / "expected.json").read_text())["report"]
    return report


def _run_json(name: str) -> dict[str, Any]:
    with tarfile.open(STORED / name / "run.tar.gz") as tar:
        member = tar.extractfile("run.json")
        assert member is not None
        run: dict[str, Any] = json.load(member)
        return run


def _verify(name: str, **kw: Any) -> dict[str, Any]:
    return verify(STORED / name / "run.tar.gz", pubkey=STORED / name / "site_key.pub", **kw)  # as make_fixture.py did


@pytest.mark.parametrize("name", RUNS)
def test_a_stored_run_verifies_to_the_figures_of_its_time(name: str) -> None:
    expected = _expected(name)
    report = _verify(name, rules_version=expected["rules_version"])
    assert report["integrity_ok"] and expected["integrity_ok"]
    # Every field that runner's verifier reported (later verifiers report more), every check it made.
    for field, value in expected.items():
        if field != "checks":
            assert report[field] == value, f"{name}: {field} was {value!r}, now {report[field]!r}"
    assert [c["name"] for c in report["checks"]] == [c["name"] for c in expected["checks"]]
    for old, new in zip(expected["checks"], report["checks"], strict=True):
        assert (new["passed"], new["measured"]) == (old["passed"], old["measured"]), f"{name}: {old['name']}"
        widened = WIDENS.get(old["name"])
        if widened is None:
            assert new["threshold"] == old["threshold"], f"{name}: {old['name']}"
        else:
            assert {**new["threshold"], widened: None} == {**old["threshold"], widened: None}
            assert set(old["threshold"][widened]) <= set(new["threshold"][widened])


@pytest.mark.parametrize("name", RUNS)
def test_a_stored_run_is_verified_under_the_rules_it_declares(name: str) -> None:
    run = _run_json(name)
    declared = R.declared_version(run)
    expected = _expected(name)["rules_version"]
    # Spec 1 does not declare its rules version: a runner of 3.1 wrote what one of 3.0 did.
    assert declared == (expected if run["spec_version"] != "1" or expected != "3.1" else "3.0")
    report = _verify(name)
    assert report["rules_version"] == declared and report["spec_version"] == run["spec_version"]
    if declared == expected:
        assert report["score_ops"] == _expected(name)["score_ops"]


def test_every_released_version_has_a_stored_run() -> None:
    stored = {(_run_json(n)["spec_version"], _expected(n)["rules_version"]) for n in RUNS}
    missing_specs = set(SPEC_VERSIONS) - {spec for spec, _ in stored}
    missing_rules = set(R.RELEASED) - {rules for _, rules in stored}
    assert not missing_specs and not missing_rules, (
        f"no stored run of spec {sorted(missing_specs)} / rules {sorted(missing_rules)}: make one with "
        "tests/fixtures/runs/make_fixture.py COMMIT NAME")
    assert (SPEC_VERSION, R.RULES_VERSION) in stored, "the version this runner writes has no stored run"


def test_the_runner_of_1_december_verifies_again() -> None:
    """The log the upgrade to rules 2.0 orphaned (run_started without precision) scores as it did."""
    report = _verify("spec1-rules1.0")
    expected = _expected("spec1-rules1.0")
    assert report["rules_version"] == "1.0" and report["score_ops"] == expected["score_ops"] > 1e10
    assert not any(c["name"].startswith(("system.", "witness.", "audit.")) for c in report["checks"])
