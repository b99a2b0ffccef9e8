"""A site's own check of its run judges it against what the service said at the run's start (rundir/recorded.py):
the registration run.json recorded, the witness key named with the run's token. So `verify DIR` and the summary
after `run` agree with the service on `system.registered` and `witness.*`; --system and --witness-key still win,
and a run with no records reads as before."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from aiperf_runner.cli import app
from aiperf_runner.run.report import summarize
from aiperf_runner.rundir import recorded
from typer.testing import CliRunner

from devdata.runfactory import TestWitness, make_run, registration_of

TRUST = ("system.registered", "witness.token", "witness.receipts", "witness.coverage", "witness.timeline")


def witnessed_run(tmp_path: Path, *, records: bool = True) -> tuple[Path, TestWitness]:
    witness = TestWitness(interval=20.0, site=1, system=1)
    run = tmp_path / "run"
    make_run(run, slots=2, trials=4, epochs=2, witness=witness, system_id=1)
    if records:
        run_json = json.loads((run / "run.json").read_text())
        run_json["system"]["registration"] = registration_of(run, id=1)  # as `run --system` keeps it
        (run / "run.json").write_text(json.dumps(run_json))
        recorded.record_witness(run, {"run_id": run_json["run_id"], "witness": {
            "fingerprint": witness.fingerprint, "public_key": base64.b64encode(witness.public).decode()}})
    return run, witness


def checks_of(args: list[str]) -> dict[str, bool]:
    result = CliRunner().invoke(app, ["verify", *args, "--json"])
    assert result.exit_code == 0, result.output
    return {c["name"]: c["passed"] for c in json.loads(result.output)["checks"]}


def test_verify_judges_a_run_directory_by_its_records(tmp_path: Path) -> None:
    run, _ = witnessed_run(tmp_path)
    assert (run / "local" / "witness.json").exists()
    got = checks_of([str(run)])
    assert all(got[name] for name in TRUST), got
    human = " ".join(CliRunner().invoke(app, ["verify", str(run)]).output.split())
    assert "judged against system 1's registration" in human and "the witness key the service named" in human


def test_without_records_the_checks_say_what_only_the_service_knows(tmp_path: Path) -> None:
    run, witness = witnessed_run(tmp_path, records=False)
    got = checks_of([str(run)])
    assert not got["system.registered"] and not got["witness.token"] and not got["witness.coverage"]
    assert recorded.judged_against(run) == (None, None)
    key = tmp_path / "witness.pub"
    key.write_text(base64.b64encode(witness.public).decode() + "\n")
    assert checks_of([str(run), "--witness-key", str(key)])["witness.coverage"]  # the options still work


def test_given_options_win_over_the_records(tmp_path: Path) -> None:
    run, _ = witnessed_run(tmp_path)
    other = tmp_path / "system.json"
    other.write_text(json.dumps(registration_of(run, id=1, status="rejected")))
    assert not checks_of([str(run), "--system", str(other)])["system.registered"]
    stranger = TestWitness()
    key = tmp_path / "stranger.pub"
    key.write_text(base64.b64encode(stranger.public).decode() + "\n")
    assert not checks_of([str(run), "--witness-key", str(key)])["witness.coverage"]


def test_a_record_whose_key_does_not_match_its_fingerprint_is_ignored(tmp_path: Path) -> None:
    run, _ = witnessed_run(tmp_path)
    path = run / "local" / "witness.json"
    data = json.loads(path.read_text())
    data["public_key"] = base64.b64encode(TestWitness().public).decode()
    path.write_text(json.dumps(data))
    assert recorded.witness_keys(run) is None
    path.write_text("not json")
    assert recorded.witness_keys(run) is None
    recorded.record_witness(run, {"witness": {"fingerprint": "SHA256:00"}})  # an older service: no public key
    assert recorded.witness_keys(run) is None


def test_the_run_summary_uses_the_records(tmp_path: Path) -> None:
    run, _ = witnessed_run(tmp_path)
    summary = summarize(run)
    assert not set(TRUST) & set(summary["checks_failed"]), summary["checks_failed"]
    assert "judged against" in summary["judged_against"]
