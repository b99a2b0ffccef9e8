"""The controller's side of a witnessed run: heartbeats to the service, receipts back into the log.

The controller's loop writes every line of the log (`heartbeat` and `witness` lines included); a
background thread only talks to the service. When a heartbeat is due the loop writes a `heartbeat`
line and hands its sequence number and hash to the thread, which posts them, signed with the site
key, and queues the receipt for the loop to log. If the service cannot be reached, training goes
on: the next attempt, after a back-off, is a fresh heartbeat (so a receipt never vouches for a
stale head). A refusal (token expired, used by another run) ends the witnessing, with a note.

A token's receipts are one chain: every heartbeat names the last receipt (`previous_receipt`), and
the service refuses one that does not. So a heartbeat whose answer was lost is looked up before the
next is sent: a receipt the service issued for it is logged like any other (every receipt issued
must be in the log).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from aiperf_runner.client.service import Service, client, post_heartbeat, run_receipts
from aiperf_runner.spec import witness as spec_witness

FIRST_RETRY_S = 5.0


class Witnessing:
    def __init__(self, service: Service, run_id: str, interval: float, site_key: Any, log_id: str | None) -> None:
        self.service = service
        self.run_id = run_id
        self.interval = interval
        self.site_key = site_key
        self.log_id = log_id
        self.refused: str | None = None  # why the service stopped witnessing this run
        self.sent = self.failed = 0
        self.thread_cpu_s = 0.0  # CPU seconds of the sending thread (bench: the cost of witnessing)
        self._next_at = 0.0  # monotonic time the next heartbeat is due
        self._retry_s = FIRST_RETRY_S
        self._lock = threading.Condition()
        self._outbox: deque[dict[str, Any]] = deque()
        self._receipts: deque[dict[str, Any]] = deque()
        self._in_flight = False
        self._previous: str | None = None  # receipt_digest of the last receipt: the next heartbeat names it
        self._unconfirmed: dict[str, Any] | None = None  # a heartbeat whose answer was lost
        self._stop = False
        self._http: Any = None  # the sending thread's HTTP client, kept between heartbeats
        self._thread = threading.Thread(target=self._loop, name="heartbeats", daemon=True)
        self._thread.start()

    # ---- the controller's loop --------------------------------------------------------------------------
    def due(self) -> bool:
        with self._lock:
            return (self.refused is None and not self._in_flight and not self._stop
                    and time.monotonic() >= self._next_at)

    def follow(self, receipt: Mapping[str, Any] | None) -> None:
        """The receipt the log ends with (a resumed run's): the next heartbeat names it."""
        with self._lock:
            self._previous = spec_witness.receipt_digest(receipt) if receipt is not None else None

    def send(self, seq: int, head: str, work: float, epochs: int, best_accuracy: float | None) -> None:
        statement = {"kind": spec_witness.HEARTBEAT_KIND, "run_id": self.run_id, "heartbeat_seq": seq, "head": head,
                     "log_id": self.log_id, "work": work, "epochs": epochs, "best_accuracy": best_accuracy,
                     "sent_at": time.time()}
        with self._lock:
            self._in_flight = True
            self._outbox.append(statement)
            self._lock.notify_all()

    def receipts(self) -> list[dict[str, Any]]:
        with self._lock:
            out = list(self._receipts)
            self._receipts.clear()
            return out

    def wait_idle(self, timeout: float) -> bool:
        """Wait until the heartbeat in flight is answered (or failed); True when nothing is in flight."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._in_flight and time.monotonic() < deadline:
                self._lock.wait(timeout=max(0.0, deadline - time.monotonic()))
            return not self._in_flight

    def missing_receipts(self, heartbeats: list[int], witnessed: set[int]) -> list[dict[str, Any]]:
        """Receipts the service issued for heartbeat lines the log holds without one (a controller killed
        between receiving a receipt and writing it)."""
        wanted = set(heartbeats) - witnessed
        if not wanted:
            return []
        try:
            issued = run_receipts(self.service, self.run_id)
        except Exception:  # noqa: BLE001 - the service may be down: the receipts stay missing
            return []
        return [r for r in issued if r.get("heartbeat_seq") in wanted]

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify_all()
        self._thread.join(timeout=10)

    # ---- the thread -----------------------------------------------------------------------------------------
    def _close_http(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._outbox and not self._stop:
                    self._lock.wait()
                if self._stop and not self._outbox:
                    self._close_http()
                    return
                statement = self._outbox.popleft()
            started = time.thread_time()
            receipt, refusal, posted = None, None, False
            if self._recover_unconfirmed():
                posted = True
                with self._lock:
                    statement = {**statement, "previous_receipt": self._previous}
                receipt, refusal = self._post({"statement": statement,
                                               "signature": spec_witness.sign(self.site_key, statement)})
            with self._lock:
                self.thread_cpu_s += time.thread_time() - started
                if receipt is not None:
                    self.sent += 1
                    self._receipts.append(receipt)
                    self._previous = spec_witness.receipt_digest(receipt)
                    self._retry_s = FIRST_RETRY_S
                    self._next_at = time.monotonic() + self.interval
                elif refusal is not None:
                    self.refused = refusal
                else:
                    if posted:
                        self._unconfirmed = statement
                    self.failed += 1
                    self._next_at = time.monotonic() + self._retry_s
                    self._retry_s = min(self._retry_s * 2, self.interval)
                self._in_flight = False
                self._lock.notify_all()

    def _recover_unconfirmed(self) -> bool:
        """Before a heartbeat follows one whose answer was lost: the receipt, if the service issued one, is
        queued for the log and chained. False when the service cannot say (the heartbeat waits its turn)."""
        lost = self._unconfirmed
        if lost is None:
            return True
        try:
            issued = run_receipts(self.service, self.run_id)
        except Exception:  # noqa: BLE001 - still unreachable
            return False
        with self._lock:
            for receipt in issued:
                if receipt.get("heartbeat_seq") == lost["heartbeat_seq"] and receipt.get("head") == lost["head"]:
                    self._receipts.append(receipt)
                    self._previous = spec_witness.receipt_digest(receipt)
            self._unconfirmed = None
        return True

    def _post(self, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        try:
            if self._http is None:
                self._http = client(self.service, timeout=20.0)
            resp = post_heartbeat(self.service, self.run_id, body, http=self._http)
        except Exception:  # noqa: BLE001 - unreachable: retried with a fresh heartbeat (and a fresh client)
            self._close_http()
            return None, None
        if resp.status_code == 201:
            return resp.json(), None
        if resp.status_code in (429,) or resp.status_code >= 500:
            return None, None
        try:
            detail = resp.json().get("detail", resp.text[:200])
        except ValueError:
            detail = resp.text[:200]
        return None, f"the service refused the heartbeat (HTTP {resp.status_code}): {detail}"


def ask_token(service: Service, registration: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """The run token for a run about to start: the service picks the run id."""
    from aiperf_runner.client.service import request_run_token

    return request_run_token(service, {"system": registration["id"], **fields})


def first_line_hash(log: Any) -> str:
    """SHA-256 of a log's first line (the run_started the token's heartbeats are bound to)."""
    import hashlib

    with open(log, "rb") as fh:
        return hashlib.sha256(fh.readline().rstrip(b"\n")).hexdigest()


def token_interval(token: dict[str, Any]) -> float:
    return float(token["statement"].get("heartbeat_interval_s") or 60.0)


def complete_witness(run_dir: Any, service: Service, timeout: float = 60.0) -> str | None:
    """Before a witnessed run is packed: if the end of its log was not witnessed (the service was down
    when the run finished), write a heartbeat now and log its receipt. A note of what happened, or None."""
    from pathlib import Path

    from aiperf_runner.run.state import RunState
    from aiperf_runner.spec import keys
    from aiperf_runner.spec.eventlog import EventWriter

    log = Path(run_dir) / "events.jsonl"
    state = RunState.load(log, keep_epochs=False)
    if state.token is None or state.finished_seq is None or state.run_id is None:
        return None
    w = Witnessing(service, state.run_id, token_interval(dict(state.token)), keys.load_private_key(),
                   first_line_hash(log))
    try:
        with EventWriter(log) as writer:
            # A receipt the service issued whose answer the run never got (the final heartbeat's, say) goes
            # into the log first: every receipt issued must be there, and the chain goes on from it.
            recovered = w.missing_receipts(state.heartbeats, state.witnessed)
            for receipt in recovered:
                state.apply(writer.append("witness", **receipt_fields(receipt)))
            w.follow(recovered[-1] if recovered else state.last_receipt)
            if recovered:
                _decide_weights(Path(run_dir), state, writer, str(recovered[-1]["beacon"]))
            if any(seq > state.finished_seq for seq in state.witnessed):  # a receipt after run_finished
                return f"{len(recovered)} receipt(s) the run never received were added to the log" if recovered else None
            beat = writer.append("heartbeat", work=0.0, epochs=state.epoch_lines,
                                 best_accuracy=state.best_epoch_accuracy)
            state.apply(beat)
            w.send(beat["seq"], writer.head, 0.0, state.epoch_lines, state.best_epoch_accuracy)
            w.wait_idle(timeout)
            receipts = w.receipts()
            for receipt in receipts:
                state.apply(writer.append("witness", **receipt_fields(receipt)))
            if receipts:  # the receipt's beacon decides the weights of the trials still waiting for one
                _decide_weights(Path(run_dir), state, writer, str(receipts[-1]["beacon"]))
    finally:
        w.stop()
    if receipts:
        return "the end of the run is witnessed now: a heartbeat and its receipt were added to the log"
    return f"the end of the run could not be witnessed: {w.refused or 'the service did not answer'}"


def _decide_weights(run_dir: Any, state: Any, writer: Any, beacon: str) -> None:
    """The weights decisions of `beacon`, on the state complete_witness already replayed (kept current)."""
    import json

    from aiperf_runner.run.weightkeeper import WeightKeeper, keep_share

    def append(kind: str, **fields: Any) -> dict[str, Any]:
        event = writer.append(kind, **fields)
        state.apply(event)
        return dict(event)

    preset = json.loads((run_dir / "run.json").read_text()).get("preset", "")
    WeightKeeper(run_dir, state, append, keep_share(preset), witnessed=True).receipt(beacon)


def receipt_fields(receipt: Mapping[str, Any]) -> dict[str, Any]:
    """A service receipt as the `witness` line's fields."""
    fields = {k: receipt[k] for k in (*spec_witness.RECEIPT_FIELDS, "signature")}
    if spec_witness.RECEIPT_CHAIN in receipt:  # absent from receipts issued before they were chained
        fields[spec_witness.RECEIPT_CHAIN] = receipt[spec_witness.RECEIPT_CHAIN]
    return fields


class WitnessedLog:
    """The log's side of a witnessed run, for the controller's loop: heartbeat lines written and sent,
    receipts logged (each receipt's beacon then decides the weights of the trials finished before it)."""

    def __init__(self, witnessing: Witnessing, log: Callable[..., dict[str, Any]], head: Callable[[], str],
                 figures: Callable[[], tuple[float, int, float | None]], on_beacon: Callable[[str], None],
                 say: Callable[[str], None]) -> None:
        self.w = witnessing
        self.log, self.head, self.figures, self.on_beacon, self.say = log, head, figures, on_beacon, say
        self.stopped = False
        self.loop_cpu_s = 0.0  # CPU seconds of the controller's loop in heartbeat and receipt lines (bench)

    def log_receipt(self, receipt: Mapping[str, Any]) -> None:
        self.log("witness", **receipt_fields(receipt))
        self.on_beacon(str(receipt["beacon"]))

    def _beat(self) -> int:
        work, epochs, best = self.figures()
        beat = self.log("heartbeat", work=work, epochs=epochs, best_accuracy=best)
        self.w.send(beat["seq"], self.head(), work, epochs, best)
        return int(beat["seq"])

    def tick(self) -> None:
        """Log the receipts that came back; write and send a heartbeat when one is due."""
        if self.stopped:
            return
        started = time.thread_time()
        for receipt in self.w.receipts():
            self.log_receipt(receipt)
        if self.w.refused is not None:
            self.say(f"witnessing stopped: {self.w.refused}")
            self.stopped = True
        elif self.w.due():
            self._beat()
        self.loop_cpu_s += time.thread_time() - started

    def final(self, timeout: float) -> None:
        """After run_finished: one last heartbeat, retried for a while, so the end of the run is witnessed."""
        if self.stopped:
            return
        deadline = time.monotonic() + timeout
        self.w.wait_idle(timeout)
        for receipt in self.w.receipts():
            self.log_receipt(receipt)
        while self.w.refused is None and time.monotonic() < deadline:
            while not self.w.due() and time.monotonic() < deadline and self.w.refused is None:
                time.sleep(0.2)
            if self.w.refused is not None or time.monotonic() >= deadline:
                break
            seq = self._beat()
            self.w.wait_idle(max(0.0, deadline - time.monotonic()))
            receipts = self.w.receipts()
            for receipt in receipts:
                self.log_receipt(receipt)
            if any(r.get("heartbeat_seq") == seq for r in receipts):
                return
        self.say("the final heartbeat was not witnessed: `aiperf-runner submit` will try again")
