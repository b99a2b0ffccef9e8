"""The list's transparency log (docs/service.md, "The list's log"): every change to the public list is an
entry of an append-only Merkle log (RFC 9162, spec/translog.py), and every new size gets a head signed
by the log key, in the transaction that makes the change (a crash never leaves a head without its
entries, nor a change without its entry).

An entry is {index, event, at, result: the row as a reader needs it to recompute the list, by, reason}
(or {index, event, at, edition} for an edition frozen). `record` skips a result whose row is what the
log already says (a re-verification that changed nothing). A row changed in the database without an
entry is what `aiperf-runner check-list` and `aiperf_rebuild --check` find.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiperf_runner.spec import keys as spec_keys
from aiperf_runner.spec import translog as spec
from aiperf_runner.spec import witness as spec_witness
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from leaderboard.models import Edition, LogEntry, LogNode, Result, TreeHead

_LOCK = 0x4149504C  # "AIPL": appends take turns (PostgreSQL advisory lock, held to the end of the transaction)
ROW_FIELDS = ("division", "rules", "rules_version", "spec_version", "preset", "precision", "score_ops",
              "regulated_score_ops", "max_accuracy", "duration_s", "audit", "review", "published")
_key_cache: dict[str, Any] = {}


# ---- the key -----------------------------------------------------------------------------------------------
def private_key() -> Any:
    """The log key, made on first use (O_EXCL: two processes starting together make one)."""
    path = Path(settings.AIPERF_LOG_KEY_FILE)
    if _key_cache.get("path") != path:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(spec_keys.private_pem(spec_keys.generate_key()))
        key = spec_keys.load_private_key(path)
        public = spec_keys.public_bytes(key.public_key())
        _key_cache.update(path=path, key=key, public=public, fingerprint=spec_keys.fingerprint(public))
    return _key_cache["key"]


def public_key() -> tuple[str, bytes]:
    """(fingerprint, raw public key) of the log key."""
    private_key()
    return str(_key_cache["fingerprint"]), bytes(_key_cache["public"])


# ---- the tree ------------------------------------------------------------------------------------------------
def _reader(cache: dict[tuple[int, int], bytes] | None = None) -> Any:
    memo = {} if cache is None else cache

    def subtree(level: int, index: int) -> bytes:
        key = (level, index)
        if key not in memo:
            memo[key] = bytes.fromhex(LogNode.objects.values_list("hash", flat=True).get(level=level, index=index))
        return memo[key]

    return subtree


def size() -> int:
    head = TreeHead.objects.only("size").first()
    return head.size if head is not None else 0


def tree(at_size: int | None = None) -> spec.Tree:
    """The log's tree (at its current size, or an earlier one's nodes: they never change)."""
    return spec.Tree(size() if at_size is None else at_size, _reader())


def append(entry: dict[str, Any], result_id: int | None = None) -> LogEntry:
    """Append an entry and sign the new head, inside the caller's transaction."""
    return append_many([(entry, result_id)])[-1]


def append_many(entries: Sequence[tuple[dict[str, Any], int | None]]) -> list[LogEntry]:
    """Append entries (each with the result it is about) and sign the new head, inside the caller's transaction."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])
        start = size()
        cache: dict[tuple[int, int], bytes] = {}
        subtree = _reader(cache)
        rows, nodes = [], []
        for index, (entry, result_id) in enumerate(entries, start):
            data = spec.entry_bytes({**entry, "index": index})
            leaf = spec.leaf_hash(data)
            made = spec.new_nodes(index, leaf, subtree)
            cache.update({(lv, i): h for lv, i, h in made})
            nodes += made
            rows.append(LogEntry(index=index, data=data.decode(), leaf_hash=leaf.hex(), result_id=result_id))
        LogNode.objects.bulk_create((LogNode(level=lv, index=i, hash=h.hex()) for lv, i, h in nodes), batch_size=2000)
        created = LogEntry.objects.bulk_create(rows, batch_size=1000)
        end = start + len(entries)
        _sign(end, spec.Tree(end, subtree).root())
    return created


def _sign(n: int, root: bytes) -> TreeHead:
    fingerprint, _ = public_key()
    statement = spec.head_statement(n, root, time.time(), fingerprint)
    return TreeHead.objects.create(size=n, root=root.hex(), timestamp=statement["timestamp"], key=fingerprint,
                                   signature=spec_witness.sign(private_key(), statement))


def head() -> TreeHead:
    """The latest signed head (the empty log's is signed on first request)."""
    latest = TreeHead.objects.first()
    if latest is not None:
        return latest
    with transaction.atomic():
        return TreeHead.objects.filter(size=0).first() or _sign(0, spec.EMPTY_ROOT)


# ---- entries -------------------------------------------------------------------------------------------------
def row_of(result: Result, live: bool) -> dict[str, Any]:
    """What a reader needs of a result to recompute its line of the list."""
    sub = result.submission
    return {"id": result.pk, "submission": sub.pk, "bundle_sha256": sub.sha256, "run_id": result.run_id,
            "site": result.site_id, "system": result.system_id, "status": sub.status,
            **{f: getattr(result, f) for f in ROW_FIELDS},
            "live": live}


def last_rows(result_ids: Any = None, using: str = "default") -> dict[int, dict[str, Any]]:
    """The row the log last states of each result (those it has an entry of; None: of every result)."""
    entries = LogEntry.objects.using(using).exclude(result_id=None)
    if result_ids is not None:
        entries = entries.filter(result_id__in=result_ids)
    out: dict[int, dict[str, Any]] = {}
    for result_id, data in entries.order_by("result_id", "-index").values_list("result_id", "data").iterator():
        if result_id is not None and result_id not in out:  # (never None: excluded above; for the type)
            out[result_id] = json.loads(data).get("result")
    return out


def record(result: Result, event: str, *, by: str = "", reason: str = "") -> LogEntry | None:
    """Log a result's row after a change (None: a rehearsal, or nothing the log does not already say)."""
    made = record_many(Result.objects.filter(pk=result.pk), event, by=by, reason=reason)
    return made[0] if made else None


def record_many(results: Any, event: str, *, by: str = "", reason: str = "") -> list[LogEntry]:
    """`record` for a queryset of results, appended at once (demo data, a bulk action)."""
    rows = results.select_related("submission").filter(submission__rehearsal=False).order_by("pk")
    live = set(Result.objects.live().filter(pk__in=rows.values("pk")).values_list("pk", flat=True))
    at = timezone.now().isoformat()
    entries = []
    before = last_rows(rows.values("pk"))
    for result in rows:
        row = row_of(result, result.pk in live)
        if row != before.get(result.pk):
            entries.append(({"event": event, "at": at, "result": row, "by": by, "reason": reason}, result.pk))
    return append_many(entries) if entries else []


def record_removed(result_ids: list[int], event: str, reason: str) -> list[LogEntry]:
    """Results deleted (a re-verification that rejected one, demo data replaced): their rows leave the list."""
    at = timezone.now().isoformat()
    logged = last_rows(result_ids)
    gone = {"removed": True, "live": False}
    entries: list[tuple[dict[str, Any], int | None]] = [
        ({"event": event, "at": at, "result": {"id": pk, **gone}, "by": "", "reason": reason}, pk)
        for pk in result_ids if pk in logged]
    return append_many(entries) if entries else []


def record_edition(edition: Edition, by: str = "") -> LogEntry:
    entries = list(edition.entries.order_by("rank").values_list("result_id", "rank"))
    return append({"event": "edition_frozen", "at": timezone.now().isoformat(), "by": by, "reason": "",
                   "edition": {"id": edition.pk, "name": edition.name, "entries": entries,
                               "rules_versions": edition.rules_versions}})


def head_json(h: TreeHead) -> dict[str, Any]:
    return {**h.statement(), "signature": h.signature}


def public_key_json() -> dict[str, str]:
    fingerprint, raw = public_key()
    return {"fingerprint": fingerprint, "public_key": base64.b64encode(raw).decode()}


def unlogged(using: str = "default") -> list[str]:
    """Rows of the database the log does not state as they are: a result changed, added or deleted without an
    entry (`aiperf_rebuild --check`). Compares what a reader recomputes: every result's row, live or not."""
    results = Result.objects.using(using).select_related("submission").filter(submission__rehearsal=False)
    live = set(Result.objects.using(using).live().values_list("pk", flat=True))
    logged = last_rows(using=using)
    out = []
    seen = set()
    for result in results.order_by("pk").iterator():
        seen.add(result.pk)
        row, said = row_of(result, result.pk in live), logged.get(result.pk)
        if said is None:
            out.append(f"result {result.pk}: in the database, never in the log")
        elif row != said:
            fields = sorted(k for k in row.keys() | said.keys() if row.get(k) != said.get(k))
            out.append(f"result {result.pk}: {', '.join(f'{k} {row.get(k)!r} (log: {said.get(k)!r})' for k in fields)}")
    for result_id, said in sorted(logged.items()):
        if result_id not in seen and not said.get("removed"):
            out.append(f"result {result_id}: in the log, deleted from the database without an entry")
    return out
