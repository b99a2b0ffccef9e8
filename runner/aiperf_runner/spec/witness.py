"""The service as a witness of a run (docs/design.md section 7, layer 2): run tokens, receipts, `witness.*`.

- A **run token** is a statement the service signs with its witness key when a site asks to start
  a run: the run id it picked, the site, the system and what the run will be (preset, rules,
  precision, slots, devices per slot, duration, runner version), `issued_at`, a nonce and the
  heartbeat interval. `run_started` carries it (`token`: {statement, signature}).
- Every heartbeat interval the controller writes a `heartbeat` line and sends its sequence number
  and hash (the next line's `prev`) to the service, signed by the site key; the service answers
  with a **receipt** signed by the witness key: run id, `heartbeat_seq`, `head`, `received_at` (its
  own clock), a 32-byte random `beacon` and `previous_receipt`, the digest of the receipt it issued
  before for the same token (null for the first). The controller appends it as a `witness` line.
- The receipts of a token form **one chain**: each heartbeat names the last receipt its log holds,
  and the service refuses (and records) a heartbeat that does not name the last receipt it issued.
  Every receipt it issued must then be in the submitted log: a beacon read and thrown away (to
  choose which trials the challenge can pick) or a second log taking turns under the same token
  shows as a receipt missing from the log.

So each witnessed prefix of the log existed at a time the service vouches for. `WitnessAudit`
listens to the log's replay and measures what `witness.token`, `witness.receipts`,
`witness.coverage` and `witness.timeline` check (docs/rules.md). Signatures are checked against
the witness's public keys (current and retired: rotation keeps old receipts valid); the service
adds what only it knows (`ServiceRecords`): the receipts it issued and whom it issued the token to.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import keys
from .logaudit import Findings
from .replay import Attempt, Replay, TrialState

TOKEN_KIND = "aiperf-run-token/1"
RECEIPT_KIND = "aiperf-receipt/1"
HEARTBEAT_KIND = "aiperf-heartbeat/1"
RECEIPT_FIELDS = ("run_id", "heartbeat_seq", "head", "received_at", "beacon", "key")
RECEIPT_CHAIN = "previous_receipt"
"""In every receipt issued since receipts were chained: receipt_digest of the one issued before (or null).
Older receipts were signed without it, so a `witness` line's statement has it only when the line does."""
TOKEN_REHEARSAL = "rehearsal"
"""In a rehearsal token's statement (true): the run is verified for its site only and never ranked."""
TOKEN_BOUND = ("preset", "rules", "precision", "slots", "devices_per_slot", "duration_s", "runner_version")


def canonical(statement: Mapping[str, Any]) -> bytes:
    return json.dumps(statement, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def sign(private_key: Any, statement: Mapping[str, Any]) -> str:
    """base64 Ed25519 signature of the statement's canonical bytes."""
    return base64.b64encode(private_key.sign(canonical(statement))).decode()


def signature_problem(statement: Mapping[str, Any], signature: Any, witness_keys: Mapping[str, bytes]) -> str | None:
    """Why `signature` is not a witness key's signature of `statement` (None: it is)."""
    fingerprint = statement.get("key")
    public = witness_keys.get(fingerprint) if isinstance(fingerprint, str) else None
    if public is None:
        return f"signed by {fingerprint!r}, which is not a witness key of this service"
    try:
        raw = base64.b64decode(str(signature), validate=True)
    except (binascii.Error, ValueError):
        return "the signature is not base64"
    if not keys.verify_signature(public, canonical(statement), raw):
        return f"not {fingerprint}'s signature"
    return None


def receipt_statement(ev: Mapping[str, Any]) -> dict[str, Any]:
    """The signed statement of a `witness` line (its fields without the signature)."""
    statement = {"kind": RECEIPT_KIND, **{k: ev.get(k) for k in RECEIPT_FIELDS}}
    if RECEIPT_CHAIN in ev:
        statement[RECEIPT_CHAIN] = ev[RECEIPT_CHAIN]
    return statement


def receipt_digest(ev: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a receipt's signed statement: what the next heartbeat and receipt name."""
    return hashlib.sha256(canonical(receipt_statement(ev))).hexdigest()


@dataclass
class ServiceRecords:
    """What the service knows of a run that the log cannot say (passed in by the service)."""

    site: Any = None  # the submitting site's id
    system: Any = None  # the registered system the result is judged by
    issued: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # heartbeat_seq -> receipt statement
    bound_log: str | None = None  # the log (hash of its first line) the token's heartbeats came from
    token_problems: list[str] = field(default_factory=list)  # e.g. the run id used by another submission


@dataclass
class Receipt:
    line: int
    heartbeat_seq: int
    received_at: float
    beacon: str


class WitnessAudit:
    """Listens to a run's replay; `checks(...)` gives the four `witness.*` checks."""

    def __init__(self, replay: Replay, witness_keys: Mapping[str, bytes]) -> None:
        self.replay = replay
        self.witness_keys = dict(witness_keys)
        self.token: Mapping[str, Any] | None = None
        self.first_line_hash: str | None = None
        self.heartbeats: dict[int, tuple[float, str | None]] = {}  # seq -> (line time, hash)
        self.receipts: list[Receipt] = []
        self.receipt_problems = Findings()
        self.late_epochs = Findings()  # epochs filled in after a receipt later than their end
        self._pending: int | None = None  # a heartbeat whose hash is the next line's prev
        self._window_min_end: dict[int, float] = {}  # heartbeat seq -> earliest ended_at of epochs after it
        self._last_heartbeat: int | None = None
        self.last_epoch_seq = -1
        self.last_epoch_end: float | None = None
        self._last_digest: str | None = None  # of the last valid receipt logged (the chain's end so far)
        replay.listen(self)

    # ---- listening -------------------------------------------------------------------------------------
    def _next_line(self, ev: Mapping[str, Any]) -> None:
        if ev.get("seq") == 1:
            self.first_line_hash = ev.get("prev")
        if self._pending is not None:
            t, _ = self.heartbeats[self._pending]
            self.heartbeats[self._pending] = (t, ev.get("prev"))
            self._pending = None

    def on_epoch(self, ev: Mapping[str, Any], trial: TrialState, attempt: Attempt | None, counted: bool,
                 line: int) -> None:
        if self._pending is not None or ev.get("seq") == 1:  # what _next_line acts on (the hot path skips the call)
            self._next_line(ev)
        seq = int(ev["seq"])
        if seq > self.last_epoch_seq:
            self.last_epoch_seq = seq
        end = float(ev["ended_at"])
        last_end = self.last_epoch_end
        if last_end is None or not last_end > end:  # max(end, last_end), comparisons only
            self.last_epoch_end = end
        if self._last_heartbeat is not None and not (
                attempt is None and (trial.trial, ev["attempt"]) in self.replay._orphaned):
            # An attempt a controller crash cut short has its last epochs copied in on --resume: exempt.
            current = self._window_min_end.get(self._last_heartbeat)
            self._window_min_end[self._last_heartbeat] = end if current is None else min(current, end)

    def on_event(self, ev: Mapping[str, Any], line: int) -> None:
        self._next_line(ev)
        kind = ev["type"]
        if kind == "heartbeat":
            seq = int(ev["seq"])
            self.heartbeats[seq] = (float(ev["t"]), None)
            self._pending = seq
            self._last_heartbeat = seq
        elif kind == "witness":
            self._receipt(ev, line)
        elif kind == "run_started" and self.token is None and isinstance(ev.get("token"), Mapping):
            self.token = ev["token"]

    def _receipt(self, ev: Mapping[str, Any], line: int) -> None:
        statement = receipt_statement(ev)
        problem = signature_problem(statement, ev.get("signature"), self.witness_keys)
        if problem is None and ev.get("run_id") != self.replay.run_id:
            problem = f"a receipt of run {ev.get('run_id')}, not of this run"
        seq = ev["heartbeat_seq"]
        if problem is None:
            beat = self.heartbeats.get(seq)
            if beat is None:
                problem = f"witnesses line {seq + 1}, which is not a heartbeat of this log"
            elif beat[1] != ev.get("head"):
                problem = f"witnesses a line {seq + 1} other than this log's (its hash differs)"
        if problem is None and self.receipts and ev["received_at"] < self.receipts[-1].received_at:
            problem = "received before the receipt logged before it"
        if problem is None and RECEIPT_CHAIN in ev and ev[RECEIPT_CHAIN] != self._last_digest:
            problem = ("names as the receipt before it one that is not the receipt logged before it: a receipt "
                       "the service issued for this token is missing from the log")
        if problem is not None:
            self.receipt_problems.add(line, problem)
            return
        self.receipts.append(Receipt(line, seq, float(ev["received_at"]), str(ev["beacon"])))
        self._last_digest = receipt_digest(ev)

    # ---- the checks ---------------------------------------------------------------------------------------
    def token_problems(self, run: Mapping[str, Any], records: ServiceRecords | None) -> list[str]:
        token = self.token
        if token is None:
            return ["unwitnessed: the run has no run token (started --offline or without a service)"]
        statement = token.get("statement") if isinstance(token.get("statement"), Mapping) else {}
        assert isinstance(statement, Mapping)
        problem = signature_problem(statement, token.get("signature"), self.witness_keys)
        if problem is not None:
            return [f"token {problem}"]
        out = []
        if statement.get("kind") != TOKEN_KIND:
            out.append(f"not a run token ({statement.get('kind')!r})")
        if statement.get("run_id") != run.get("run_id"):
            out.append(f"the token is for run {statement.get('run_id')}, the log is run {run.get('run_id')}")
        config = run.get("config") if isinstance(run.get("config"), Mapping) else {}
        assert isinstance(config, Mapping)
        system = run.get("system") if isinstance(run.get("system"), Mapping) else {}
        assert isinstance(system, Mapping)
        for key in TOKEN_BOUND:
            have = config.get(key) if key in ("slots", "devices_per_slot", "duration_s") else run.get(key)
            if statement.get(key) != have:
                out.append(f"the token says {key} {statement.get(key)!r}, the run {have!r}")
        if str(statement.get("system")) != str(system.get("id")):
            out.append(f"the token is for system {statement.get('system')}, run.json names {system.get('id')}")
        if records is not None:
            if records.site is not None and str(statement.get("site")) != str(records.site):
                out.append("the token was issued to another site")
            if records.system is not None and str(statement.get("system")) != str(records.system):
                out.append("the token was issued for another system")
            if records.bound_log is not None and self.first_line_hash != records.bound_log:
                out.append("the token's heartbeats came from another log: the token was used for a second run")
            out.extend(records.token_problems)
        return out

    def missing_receipts(self, records: ServiceRecords | None) -> list[str]:
        """Receipts the service issued for this token that the log does not hold (every one must be:
        a token's receipts are one chain, in one log), and receipts in the log that differ from what it issued."""
        if records is None:
            return []
        logged = {r.heartbeat_seq: r for r in self.receipts}
        out = []
        for seq, issued in sorted(records.issued.items()):
            r = logged.get(seq)
            beat = self.heartbeats.get(seq)
            if r is None:
                if beat is not None and beat[1] == issued.get("head"):
                    out.append(f"the receipt of the heartbeat on line {seq + 1} was removed from the log")
                else:
                    out.append(f"the service issued a receipt for a heartbeat (line {seq + 1}) this log does not "
                               "hold: a beacon was received and thrown away, or another log sent heartbeats under "
                               "this run's token")
            elif (r.beacon, r.received_at) != (issued.get("beacon"), issued.get("received_at")):
                out.append(f"line {r.line}: the receipt differs from the one the service issued")
        for seq, r in logged.items():
            if seq not in records.issued:
                out.append(f"line {r.line}: the service has no record of issuing this receipt")
        return out

    def gaps(self, issued_at: float | None) -> list[tuple[float, str]]:
        """(seconds, what) of every stretch without a receipt, in the service's clock."""
        out: list[tuple[float, str]] = []
        times = [r.received_at for r in self.receipts]
        if issued_at is not None and times:
            out.append((times[0] - issued_at, "token issued -> first receipt"))
        out += [(b - a, f"receipt {i + 1} -> receipt {i + 2}")
                for i, (a, b) in enumerate(zip(times, times[1:], strict=False))]
        if self.last_epoch_end is not None and times:
            out.append((times[-1] - self.last_epoch_end, "last epoch -> final receipt"))
        return out

    def timeline_problems(self, t0: float | None, end: float | None, issued_at: float | None,
                          tolerance: float, relative: float) -> list[str]:
        out = []
        received = {r.heartbeat_seq: r.received_at for r in self.receipts}
        late = 0
        for seq, min_end in sorted(self._window_min_end.items()):
            at = received.get(seq)
            if at is not None and min_end + tolerance < at:
                late += 1
                if late <= 3:
                    out.append(f"an epoch after the heartbeat on line {seq + 1} ended at {min_end:.3f}, before that "
                               f"heartbeat was received ({at:.3f}): it was written into the log later than it claims")
        if late > 3:
            out.append(f"(and {late - 3} more heartbeats with such epochs after them)")
        if not self.receipts:
            return out  # nothing witnessed: witness.coverage says so
        last_witnessed = self.receipts[-1].heartbeat_seq
        if self.last_epoch_seq > last_witnessed:
            out.append(f"epochs logged after the last witnessed heartbeat (line {last_witnessed + 1})")
        first, last = self.receipts[0], self.receipts[-1]
        log_span = self.heartbeats[last.heartbeat_seq][0] - self.heartbeats[first.heartbeat_seq][0]
        witnessed = last.received_at - first.received_at
        if abs(log_span - witnessed) > tolerance + relative * witnessed:
            out.append(f"the log's clock ran {log_span:.1f} s between its first and last witnessed heartbeats, "
                       f"the service's {witnessed:.1f} s")
        if t0 is not None and issued_at is not None and t0 < issued_at - tolerance:
            out.append(f"the scored run starts {issued_at - t0:.1f} s before its token was issued")
        if end is not None and end > last.received_at + tolerance:
            out.append(f"the scored run ends {end - last.received_at:.1f} s after the last receipt")
        return out


def _statement_number(token: Mapping[str, Any] | None, key: str) -> float | None:
    statement = token.get("statement") if token is not None else None
    value = statement.get(key) if isinstance(statement, Mapping) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def token_issued_at(token: Mapping[str, Any] | None) -> float | None:
    return _statement_number(token, "issued_at")


def token_interval(token: Mapping[str, Any] | None, default: float) -> float:
    value = _statement_number(token, "heartbeat_interval_s")
    return value if value is not None and value > 0 else default
