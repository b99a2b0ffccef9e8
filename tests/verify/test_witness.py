"""The witness.* checks on factory logs witnessed by a test's stand-in for the service (TestWitness):
an honest witnessed log passes, each tampering fails a named witness check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.spec.eventlog import encode
from aiperf_runner.spec.verify import verify as spec_verify
from aiperf_runner.spec.witness import ServiceRecords

from devdata.runfactory import TestWitness, make_run, rewrite_events
from tests.forgeries import HONEST, honest_registration

WITNESS = TestWitness(interval=60.0)


def verify(path: Path, witness: TestWitness = WITNESS, **kw: Any) -> dict[str, Any]:
    return spec_verify(path, system=honest_registration(path), witness_keys=witness.keys, **kw)


def failed(report: dict[str, Any]) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["passed"]}


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


def witnessed(path: Path, **over: Any) -> Path:
    make_run(path, **{**HONEST, "run_id": "0f" * 16, "witness": WITNESS, **over})
    return path


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (path / "events.jsonl").read_text().splitlines()]


def append(path: Path, events: list[dict[str, Any]]) -> None:
    """Append lines that continue the chain (what a forger can do without touching earlier lines)."""
    import hashlib

    log = path / "events.jsonl"
    raw = log.read_bytes().splitlines()
    prev, seq = hashlib.sha256(raw[-1]).hexdigest(), len(raw)
    with open(log, "ab") as fh:
        for ev in events:
            body = encode({**ev, "seq": seq, "prev": prev})
            fh.write(body + b"\n")
            prev, seq = hashlib.sha256(body).hexdigest(), seq + 1


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return witnessed(tmp_path / "run")


def test_a_witnessed_log_passes_every_witness_check(run: Path) -> None:
    report = verify(run)
    assert failed(report) == set()
    assert report["division"] == "official"
    assert check(report, "witness.coverage")["measured"] <= 60.0 + 1


def test_unwitnessed_is_open_division_not_rejected(tmp_path: Path) -> None:
    path = witnessed(tmp_path / "run", witness=None)
    report = verify(path)
    assert failed(report) == {"witness.token", "witness.coverage"}
    assert "unwitnessed" in check(report, "witness.token")["message"]
    assert report["division"] == "open" and not report["rejected"]


def test_without_the_witness_key_nothing_can_be_checked_offline(run: Path) -> None:
    report = spec_verify(run, system=honest_registration(run))
    assert "no witness key" in check(report, "witness.token")["message"]
    assert report["division"] == "open"


def test_timestamps_scaled_by_half(run: Path) -> None:
    start = lines(run)[0]["t"]

    def scale(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in events:
            e["t"] = start + (e["t"] - start) / 2
            for k in ("started_at", "ended_at"):
                if k in e:
                    e[k] = start + (e[k] - start) / 2
            if "seconds" in e:
                e["seconds"] /= 2
        return events

    rewrite_events(run, scale)
    report = verify(run)
    assert {"witness.receipts", "witness.timeline"} & failed(report)
    assert report["rejected"]


def test_epochs_appended_after_the_last_receipt(run: Path) -> None:
    last = [e for e in lines(run) if e["type"] == "epoch_end"][-1]
    t = lines(run)[-1]["t"]
    extra = {k: v for k, v in last.items() if k not in ("seq", "prev")}
    append(run, [{**extra, "t": t + 1, "epoch": last["epoch"] + 1, "started_at": t - 200, "ended_at": t}])
    report = verify(run)
    assert "witness.timeline" in failed(report)
    assert "after the last witnessed heartbeat" in check(report, "witness.timeline")["message"]


def test_receipts_signed_by_another_key(run: Path) -> None:
    impostor = TestWitness()
    report = verify(run, witness=impostor)
    assert {"witness.token", "witness.receipts"} <= failed(report)
    assert "not a witness key" in check(report, "witness.receipts")["message"]
    assert report["rejected"]


def test_a_receipt_moved_from_another_run(run: Path, tmp_path: Path) -> None:
    other = witnessed(tmp_path / "other", run_id="1e" * 16)
    receipt = [e for e in lines(other) if e["type"] == "witness"][3]
    append(run, [{k: v for k, v in receipt.items() if k not in ("seq", "prev")}])
    report = verify(run)
    assert "witness.receipts" in failed(report)
    assert "not of this run" in check(report, "witness.receipts")["message"]


def test_a_token_used_for_a_second_run(run: Path) -> None:
    records = ServiceRecords(site=WITNESS.site, system=WITNESS.system, bound_log="ab" * 32)
    report = verify(run, records=records)
    assert "witness.token" in failed(report)
    assert "second run" in check(report, "witness.token")["message"]


def test_receipts_removed(run: Path) -> None:
    issued = {e["heartbeat_seq"]: e for e in lines(run) if e["type"] == "witness"}
    records = ServiceRecords(site=WITNESS.site, system=WITNESS.system, issued=issued)
    assert failed(verify(run, records=records)) == set()
    rewrite_events(run, lambda events: [e for i, e in enumerate(events) if e["type"] != "witness" or i % 3])
    report = verify(run, records=records)
    assert "witness.receipts" in failed(report) and report["rejected"]


def test_a_service_outage_shows_in_the_coverage(tmp_path: Path) -> None:
    """No receipts for a while (heartbeats went unanswered): measured, and failed past the bound."""
    def outage(witness: TestWitness, start: float, end: float) -> TestWitness:
        answered = witness.receipt

        def receipt(run_id: str, seq: int, head: str, received_at: float) -> dict[str, Any] | None:
            return None if start <= received_at - 1_764_000_000.0 <= end else answered(run_id, seq, head, received_at)
        witness.receipt = receipt  # type: ignore[method-assign]
        return witness

    w = TestWitness(interval=60.0)
    short = witnessed(tmp_path / "short", witness=outage(w, 600, 780))
    report = spec_verify(short, system=honest_registration(short), witness_keys=w.keys)
    assert "witness.coverage" not in failed(report)
    assert 180 < check(report, "witness.coverage")["measured"] <= 300
    w = TestWitness(interval=60.0)
    long = witnessed(tmp_path / "long", witness=outage(w, 600, 1200))
    report = spec_verify(long, system=honest_registration(long), witness_keys=w.keys)
    assert "witness.coverage" in failed(report) and not report["rejected"]
