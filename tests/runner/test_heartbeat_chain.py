"""The runner's side of the receipt chain (run/heartbeats.py): each heartbeat names the last receipt; a
heartbeat whose answer was lost after the service issued its receipt is looked up before the next one
goes out, and that receipt is logged too. The service here is a stand-in that chains receipts as the
real one does (leaderboard/witness.py; the real one is in tests/service/test_receipt_chain.py)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from aiperf_runner.run import heartbeats
from aiperf_runner.spec import keys
from aiperf_runner.spec import witness as spec_witness


class ChainingService:
    def __init__(self) -> None:
        self.issued: list[dict[str, Any]] = []
        self.refused: list[int] = []
        self.lose_answer_of: set[int] = set()  # heartbeat seqs whose receipt is issued and its answer lost
        self.down = False

    def post(self, service: Any, run_id: str, body: dict[str, Any], **_: Any) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("down")
        statement = body["statement"]
        last = spec_witness.receipt_digest(self.issued[-1]) if self.issued else None
        if statement["previous_receipt"] != last:
            self.refused.append(statement["heartbeat_seq"])
            return httpx.Response(409, json={"detail": "does not name the last receipt", "check": "heartbeat"})
        receipt = {"run_id": run_id, "heartbeat_seq": statement["heartbeat_seq"], "head": statement["head"],
                   "received_at": time.time(), "beacon": "b" * 64, "key": "k", "signature": "s",
                   "previous_receipt": last}
        self.issued.append(receipt)
        if statement["heartbeat_seq"] in self.lose_answer_of:
            raise httpx.ReadTimeout("the answer was lost")
        return httpx.Response(201, json=receipt)

    def receipts(self, service: Any, run_id: str) -> list[dict[str, Any]]:
        if self.down:
            raise httpx.ConnectError("down")
        return list(self.issued)


@pytest.fixture
def service(monkeypatch) -> ChainingService:
    fake = ChainingService()
    monkeypatch.setattr(heartbeats, "post_heartbeat", fake.post)
    monkeypatch.setattr(heartbeats, "run_receipts", fake.receipts)
    monkeypatch.setattr(heartbeats, "client", lambda *a, **k: httpx.Client())
    monkeypatch.setattr(heartbeats, "FIRST_RETRY_S", 0.0)
    return fake


def send(w: heartbeats.Witnessing, seq: int) -> list[dict[str, Any]]:
    w._next_at = 0.0  # due now: the test does not wait out the interval or the back-off
    w.send(seq, f"{seq:064x}", 0.0, seq, None)
    assert w.wait_idle(10)
    return w.receipts()


def test_a_lost_answer_is_found_and_logged_before_the_next_heartbeat(service: ChainingService) -> None:
    w = heartbeats.Witnessing(object(), "r" * 32, 0.0, keys.generate_key(), "1f" * 32)
    try:
        assert [r["heartbeat_seq"] for r in send(w, 1)] == [1]
        service.lose_answer_of.add(4)
        assert send(w, 4) == []  # issued, but the run never heard
        service.down = True
        assert send(w, 7) == []  # nothing to ask: this one waits for the next turn
        service.down = False
        got = send(w, 9)
        assert [r["heartbeat_seq"] for r in got] == [4, 9]  # the lost receipt first, then the new one, chained
        assert got[1]["previous_receipt"] == spec_witness.receipt_digest(got[0])
        assert service.refused == [] and w.refused is None
        assert [r["heartbeat_seq"] for r in service.issued] == [1, 4, 9]
    finally:
        w.stop()


def test_a_resumed_run_chains_from_the_receipt_its_log_ends_with(service: ChainingService) -> None:
    first = heartbeats.Witnessing(object(), "r" * 32, 0.0, keys.generate_key(), "1f" * 32)
    logged = send(first, 1)
    first.stop()
    resumed = heartbeats.Witnessing(object(), "r" * 32, 0.0, keys.generate_key(), "1f" * 32)
    try:
        assert send(resumed, 5) == [] and resumed.refused  # not told where the chain is: refused
        service.refused.clear()
        again = heartbeats.Witnessing(object(), "r" * 32, 0.0, keys.generate_key(), "1f" * 32)
        again.follow(logged[-1])
        assert [r["heartbeat_seq"] for r in send(again, 6)] == [6] and service.refused == []
        again.stop()
    finally:
        resumed.stop()
