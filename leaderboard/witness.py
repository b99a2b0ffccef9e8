"""The service as the witness of runs (docs/design.md section 7, layer 2; docs/service.md "Witnessed runs").

- The witness key: an Ed25519 private key in `AIPERF_WITNESS_KEY_FILE`; every public key it ever had
  is a `WitnessKey` row (retired ones too: their receipts stay valid).
- `issue_token`: a run the site is about to start gets its run id and a signed token (`RunAttempt`).
- `receive_heartbeat`: a heartbeat signed by the site key gets a receipt signed by the witness key:
  the service's clock, a 32-byte random beacon and the digest of the receipt before it (`Heartbeat`).
  A token's receipts are one chain: a heartbeat that does not name the last receipt issued is refused
  and counted (`RunAttempt.chain_breaks`), so a beacon cannot be read, thrown away and asked again.
- `records`: what verification needs of the service's records (spec/witness.py `ServiceRecords`).
"""

from __future__ import annotations

import base64
import os
import secrets
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiperf_runner.spec import keys as spec_keys
from aiperf_runner.spec import rules as spec_rules
from aiperf_runner.spec import witness as spec_witness
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from leaderboard.errors import Rejected
from leaderboard.models import Heartbeat, RunAttempt, Site, SiteKey, System, WitnessKey

_cache: dict[str, Any] = {}


class WitnessUnavailable(RuntimeError):
    """The service has no witness key: `manage.py aiperf_witness_key create`."""


# ---- the key ---------------------------------------------------------------------------------------------
def key_file() -> Path:
    return Path(settings.AIPERF_WITNESS_KEY_FILE)


def private_key() -> Any:
    path = key_file()
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        raise WitnessUnavailable(f"no witness key at {path}: run `manage.py aiperf_witness_key create`") from None
    if _cache.get("stamp") != stamp:
        key = spec_keys.load_private_key(path)
        public = spec_keys.public_bytes(key.public_key())
        _cache.update(stamp=stamp, key=key, fingerprint=spec_keys.fingerprint(public), public=public)
    return _cache["key"]


def fingerprint() -> str:
    private_key()
    return str(_cache["fingerprint"])


def public_key_b64() -> str:
    """The current witness key's public half, base64 (what `/api/v1/witness/` and a run token's answer give)."""
    private_key()
    return base64.b64encode(_cache["public"]).decode()


def create_key(*, rotate: bool = False) -> tuple[WitnessKey, bool]:
    """Make the witness key if there is none (or a new one with `rotate`); (its row, whether new)."""
    path = key_file()
    if path.exists() and not rotate:
        key = spec_keys.load_private_key(path)
        return _record(key), False
    old = spec_keys.load_private_key(path) if path.exists() else None
    key = spec_keys.generate_key()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(spec_keys.private_pem(key))
    with transaction.atomic():
        if old is not None:
            _record(old)
            WitnessKey.objects.filter(retired_at__isnull=True).update(retired_at=timezone.now())
        os.replace(tmp, path)
        row = _record(key)
    _cache.clear()
    return row, True


def _record(key: Any) -> WitnessKey:
    public = spec_keys.public_bytes(key.public_key())
    row, _ = WitnessKey.objects.get_or_create(
        fingerprint=spec_keys.fingerprint(public), defaults={"public_key": base64.b64encode(public).decode()})
    return row


def public_keys() -> dict[str, bytes]:
    """{fingerprint: raw public key} of every witness key the service has had."""
    return {k.fingerprint: base64.b64decode(k.public_key) for k in WitnessKey.objects.all()}


# ---- tokens -------------------------------------------------------------------------------------------------
def heartbeat_interval() -> float:
    low, high = spec_rules.thresholds()["heartbeat_interval_bounds"]
    return float(min(max(settings.AIPERF_HEARTBEAT_INTERVAL_S, low), high))


def issue_token(site: Site, system: System, fields: dict[str, Any], *, rehearsal: bool = False) -> RunAttempt:
    """A run token for a run `site` is about to start on `system`: the service picks the run id.
    A rehearsal's token says so in its signed statement (`rehearsal: true`), and its attempt is marked."""
    key = private_key()
    now = time.time()
    run_id = secrets.token_hex(16)
    interval = heartbeat_interval()
    statement = {"kind": spec_witness.TOKEN_KIND, "run_id": run_id, "site": site.pk, "system": system.pk,
                 **{k: fields[k] for k in spec_witness.TOKEN_BOUND}, "issued_at": now,
                 "nonce": secrets.token_hex(16), "heartbeat_interval_s": interval, "key": fingerprint()}
    if rehearsal:
        statement[spec_witness.TOKEN_REHEARSAL] = True
    return RunAttempt.objects.create(run_id=run_id, site=site, system=system, statement=statement,
                                     signature=spec_witness.sign(key, statement), rehearsal=rehearsal,
                                     issued_at=datetime.fromtimestamp(now, tz=UTC), heartbeat_interval_s=interval)


def token_of(attempt: RunAttempt) -> dict[str, Any]:
    return {"statement": attempt.statement, "signature": attempt.signature}


# ---- heartbeats -----------------------------------------------------------------------------------------
def receive_heartbeat(site: Site, run_id: str, body: Any) -> tuple[Heartbeat, bool]:
    """Check a heartbeat and give it a receipt; (the heartbeat with its receipt, whether new).

    Rejected (with its HTTP status) when it is not the site's run, not signed by one of the site's
    keys, the token expired unused, the token already started another log, or it goes backwards.
    """
    statement, signature = _parts(body)
    try:
        return _receive(site, run_id, statement, signature)
    except TokenReused as exc:
        # Recorded outside the refused heartbeat's transaction (which rolls back): a token used for
        # a second log fails witness.token whatever log is submitted with it.
        RunAttempt.objects.filter(run_id=run_id).update(reused=True)
        raise exc.rejection from None
    except ChainBroken as exc:
        RunAttempt.objects.filter(run_id=run_id).update(chain_breaks=F("chain_breaks") + 1)
        raise exc.rejection from None


class _Recorded(Exception):
    """A refusal the attempt's record keeps (raised inside the heartbeat's transaction, recorded after it)."""

    def __init__(self, rejection: Rejected) -> None:
        super().__init__(rejection.detail)
        self.rejection = rejection


class TokenReused(_Recorded):
    """A heartbeat from a log other than the one the token's first heartbeat came from."""


class ChainBroken(_Recorded):
    """A heartbeat that does not follow the last receipt issued for its token (names another, or goes back)."""


def _receive(site: Site, run_id: str, statement: dict[str, Any], signature: str) -> tuple[Heartbeat, bool]:
    with transaction.atomic():
        attempt = RunAttempt.objects.select_for_update().filter(run_id=run_id).first()
        if attempt is None or attempt.site_id != site.pk:
            raise Rejected("run", f"no run {run_id} of site {site.name!r}: ask for a token first", status=404)
        _check_statement(attempt, statement, signature, site)
        seq = statement["heartbeat_seq"]
        existing = attempt.receipts.filter(heartbeat_seq=seq).first()
        if existing is not None:
            if existing.head != statement["head"]:
                raise Rejected("heartbeat", f"heartbeat {seq} was received before with another head", status=409)
            return existing, False  # a retry whose answer was lost: the same receipt
        last = attempt.receipts.order_by("-heartbeat_seq").only("heartbeat_seq", "digest").first()
        if last is not None and seq < last.heartbeat_seq:
            raise ChainBroken(Rejected("heartbeat", f"heartbeat {seq} comes after heartbeat {last.heartbeat_seq}: "
                                                    "the log goes backwards; this refusal is recorded", status=409))
        previous = last.digest if last is not None else None
        if statement["previous_receipt"] != previous:
            raise ChainBroken(Rejected(
                "heartbeat", f"heartbeat {seq} does not name the last receipt issued for this run "
                             f"({'that of heartbeat ' + str(last.heartbeat_seq) if last else 'none yet'}): a run's "
                             "receipts are one chain, and every receipt issued must be in the submitted log; "
                             "this refusal is recorded", status=409))
        beat = _receipt(attempt, statement, previous)
        attempt.heartbeats += 1
        attempt.last_heartbeat_at = timezone.now()
        attempt.save(update_fields=["heartbeats", "last_heartbeat_at", "log_id"])
        return beat, True


def _parts(body: Any) -> tuple[dict[str, Any], str]:
    statement = body.get("statement") if isinstance(body, dict) else None
    signature = body.get("signature") if isinstance(body, dict) else None
    if not isinstance(statement, dict) or not isinstance(signature, str):
        raise Rejected("heartbeat", "send {statement, signature}, the statement signed by the site key")
    problems = []
    for name, ok in (("kind", statement.get("kind") == spec_witness.HEARTBEAT_KIND),
                     ("heartbeat_seq", type(statement.get("heartbeat_seq")) is int and statement["heartbeat_seq"] >= 0),
                     ("head", _hex64(statement.get("head"))), ("log_id", _hex64(statement.get("log_id"))),
                     ("work", type(statement.get("work")) in (int, float)),
                     ("epochs", type(statement.get("epochs")) is int),
                     ("previous_receipt", "previous_receipt" in statement
                      and (statement["previous_receipt"] is None or _hex64(statement["previous_receipt"])))):
        if not ok:
            problems.append(name)
    if problems:
        raise Rejected("heartbeat", f"heartbeat statement: bad or missing {', '.join(problems)}")
    return statement, signature


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _hex64(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


def _check_statement(attempt: RunAttempt, statement: dict[str, Any], signature: str, site: Site) -> None:
    if statement.get("run_id") != attempt.run_id:
        raise Rejected("heartbeat", "the heartbeat names another run")
    try:
        raw = base64.b64decode(signature, validate=True)
    except ValueError:
        raise Rejected("signature", "the heartbeat's signature is not base64") from None
    data = spec_witness.canonical(statement)
    site_keys = SiteKey.objects.filter(site=site, revoked_at__isnull=True)
    if not any(spec_keys.verify_signature(base64.b64decode(k.public_key), data, raw) for k in site_keys):
        raise Rejected("signature", "the heartbeat is not signed by a registered, unrevoked key of the site",
                       status=403)
    if not attempt.heartbeats and timezone.now() > attempt.issued_at + timedelta(seconds=settings.AIPERF_TOKEN_TTL_S):
        raise Rejected("token", f"the run token expired unused (issued {attempt.issued_at:%Y-%m-%d %H:%M} UTC; "
                                f"a token must start its run within {settings.AIPERF_TOKEN_TTL_S:.0f} s)", status=410)
    if not attempt.log_id:
        attempt.log_id = statement["log_id"]
    elif attempt.log_id != statement["log_id"]:
        raise TokenReused(Rejected("token", "this run token already started another run: a token starts one run "
                                            "only", status=409))
    if attempt.submission_id is not None:
        raise Rejected("token", "this run was submitted: no more heartbeats", status=409)


def _receipt(attempt: RunAttempt, statement: dict[str, Any], previous: str | None) -> Heartbeat:
    received_at = time.time()
    receipt = {"kind": spec_witness.RECEIPT_KIND, "run_id": attempt.run_id, "heartbeat_seq": statement["heartbeat_seq"],
               "head": statement["head"], "received_at": received_at, "beacon": secrets.token_hex(32),
               "key": fingerprint(), spec_witness.RECEIPT_CHAIN: previous}
    best = statement.get("best_accuracy")
    return Heartbeat.objects.create(
        attempt=attempt, heartbeat_seq=receipt["heartbeat_seq"], head=receipt["head"], received_at=received_at,
        beacon=receipt["beacon"], key=receipt["key"], signature=spec_witness.sign(private_key(), receipt),
        work=float(statement["work"]), epochs=int(statement["epochs"]),
        best_accuracy=_number(best), sent_at=_number(statement.get("sent_at")),
        chained=True, previous_receipt=previous, digest=spec_witness.receipt_digest(receipt))


# ---- what verification needs -------------------------------------------------------------------------------
def records(run_id: str, site: Site, submission_id: int | None) -> tuple[spec_witness.ServiceRecords, RunAttempt | None]:
    """The service's records of a run for verify(), and its attempt (None: never issued a token)."""
    attempt = RunAttempt.objects.filter(run_id=run_id).select_related("system").first()
    if attempt is None:
        return spec_witness.ServiceRecords(site=site.pk), None
    problems = []
    if attempt.submission_id is not None and attempt.submission_id != submission_id:
        problems.append(f"the token's run was submitted already (submission {attempt.submission_id})")
    if attempt.reused:
        problems.append("the token's heartbeats came from two logs: it was used for a second run")
    if attempt.chain_breaks:
        problems.append(f"{attempt.chain_breaks} heartbeat(s) under this token were refused for not following the "
                        "last receipt issued: a receipt thrown away, a log gone backwards, or another log sending "
                        "heartbeats under the token")
    issued = {h.heartbeat_seq: {**h.receipt(), "kind": spec_witness.RECEIPT_KIND} for h in attempt.receipts.all()}
    return spec_witness.ServiceRecords(site=site.pk, system=attempt.system_id, issued=issued,
                                       bound_log=attempt.log_id or None, token_problems=problems), attempt
