"""`aiperf-runner check-list`: a reader's check of a list against its transparency log (docs/service.md,
"The list's log").

It reads the log key (pinned on first use, or given), the signed head, and every entry; checks each
entry's leaf hash, the root of all of them against the head, the head's consistency with the head
this machine saw last (from the entries it holds, and the service's RFC 9162 proof); then recomputes
the live list from the entries and compares it with the list the API publishes. The last head seen is
kept per server in the config directory (`list_heads/`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiperf_runner.spec import keys, translog
from aiperf_runner.spec import witness as spec_witness
from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.llmflops import DEFAULT_LLM_RULES

PAGE = 1000


class Unreachable(AiperfError):
    """The service could not be read (not a verdict on the list)."""


@dataclass
class Verdict:
    server: str
    size: int = 0
    root: str = ""
    previous_size: int | None = None
    problems: list[str] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    listed: int = 0

    @property
    def consistent(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        return {"server": self.server, "consistent": self.consistent, "size": self.size, "root": self.root,
                "previous_size": self.previous_size, "listed": self.listed, "problems": self.problems,
                "changes": self.changes}


def state_file(server: str) -> Path:
    name = hashlib.sha256(server.rstrip("/").encode()).hexdigest()[:16]
    return keys.config_dir() / "list_heads" / f"{name}.json"


def _get(http: Any, path: str, **params: Any) -> Any:
    try:
        resp = http.get(path, params=params)
    except Exception as exc:  # noqa: BLE001 - any transport failure: the list could not be read
        raise Unreachable(f"{path}: {exc}") from None
    if resp.status_code != 200:
        raise Unreachable(f"{path}: HTTP {resp.status_code}: {resp.text[:200]}")
    return resp.json()


def check(server: str, *, key: str | None = None, http: Any = None) -> Verdict:
    """Check the list at `server`; the new head is kept only when everything is consistent."""
    import httpx

    server = server.rstrip("/")
    own = http is None
    http = http or httpx.Client(base_url=server, timeout=60.0, follow_redirects=True,
                                headers={"Accept": "application/json"})
    try:
        return _check(server, http, key)
    finally:
        if own:
            http.close()


def _check(server: str, http: Any, pinned_key: str | None) -> Verdict:
    verdict = Verdict(server)
    path = state_file(server)
    saved = json.loads(path.read_text()) if path.exists() else {}
    log_key = _get(http, "/api/v1/log/key/")
    expected = pinned_key or saved.get("key")
    if expected and log_key.get("fingerprint") != expected:
        verdict.problems.append(f"the log key is {log_key.get('fingerprint')}, not {expected}: the service's "
                                "log was replaced")
        return verdict
    head = _get(http, "/api/v1/log/head/")
    statement = {k: head.get(k) for k in ("kind", "size", "root", "timestamp", "key")}
    public = base64.b64decode(str(log_key.get("public_key")))
    problem = spec_witness.signature_problem(statement, head.get("signature"), {str(log_key["fingerprint"]): public})
    if problem is not None:
        verdict.problems.append(f"the tree head's signature: {problem}")
        return verdict
    verdict.size, verdict.root = int(head["size"]), str(head["root"])
    entries, leaves = _entries(http, verdict)
    tree = translog.tree_of(leaves)
    if not verdict.problems and tree.root().hex() != verdict.root:
        verdict.problems.append(f"the entries' root is {tree.root().hex()}, the signed head says {verdict.root}")
    previous = saved.get("head")
    if previous and not verdict.problems:
        _consistency(http, verdict, tree, previous, entries)
    if not verdict.problems:
        logged = translog.listed_from_rows(translog.rows_from_entries(entries))
        published = _published(http)
        verdict.listed = len(published)
        verdict.problems += translog.list_problems(logged, published)
    if verdict.consistent:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"key": log_key["fingerprint"], "head": head}, sort_keys=True))
        os.replace(tmp, path)
    return verdict


def _entries(http: Any, verdict: Verdict) -> tuple[list[dict[str, Any]], list[bytes]]:
    entries: list[dict[str, Any]] = []
    leaves: list[bytes] = []
    while len(leaves) < verdict.size:
        page = _get(http, "/api/v1/log/entries/", start=len(leaves), end=min(verdict.size, len(leaves) + PAGE))
        if not page["entries"]:
            verdict.problems.append(f"the log serves {len(leaves)} entries, its head says {verdict.size}")
            break
        for item in page["entries"]:
            index, data = len(leaves), str(item["data"]).encode()
            entry = json.loads(data)
            if item.get("index") != index or entry.get("index") != index:
                verdict.problems.append(f"entry {index}: served as entry {item.get('index')}")
            leaf = translog.leaf_hash(data)
            if leaf.hex() != item.get("leaf_hash"):
                verdict.problems.append(f"entry {index}: its leaf hash is not the hash of its data")
            entries.append(entry)
            leaves.append(leaf)
    return entries, leaves


def _consistency(http: Any, verdict: Verdict, tree: translog.Tree, previous: dict[str, Any],
                 entries: list[dict[str, Any]]) -> None:
    old_size, old_root = int(previous["size"]), str(previous["root"])
    verdict.previous_size = old_size
    if old_size > verdict.size:
        verdict.problems.append(f"the log has {verdict.size} entries; this machine saw {old_size} before: entries "
                                "were removed")
        return
    if old_size == 0:
        verdict.changes = [_change(e) for e in entries]
        return
    if tree.root(old_size).hex() != old_root:
        verdict.problems.append(f"the first {old_size} entries no longer have the root this machine saw: the log was "
                                "rewritten or forked")
        return
    answer = _get(http, "/api/v1/log/consistency/", first=old_size, second=verdict.size)
    try:
        translog.verify_consistency(old_size, verdict.size, bytes.fromhex(old_root), bytes.fromhex(verdict.root),
                                    [bytes.fromhex(h) for h in answer["proof"]])
    except translog.ProofError as exc:
        verdict.problems.append(f"the service's consistency proof from size {old_size}: {exc}")
        return
    verdict.changes = [_change(e) for e in entries[old_size:]]


def _change(entry: dict[str, Any]) -> dict[str, Any]:
    row = entry.get("result") or {}
    return {"index": entry.get("index"), "event": entry.get("event"), "at": entry.get("at"),
            "result": row.get("id"), "edition": (entry.get("edition") or {}).get("name"),
            "by": entry.get("by") or "", "reason": entry.get("reason") or ""}


def _published(http: Any) -> dict[int, dict[str, Any]]:
    """Every live result the API lists (each FLOP rules' list: v2, v1-compat and AIPerf-LLM's llm-v1), as {id: row
    with the system's id}. Read past the service's page cache (a parameter of its own: a cached page may be
    minutes older than the database)."""
    out: dict[int, dict[str, Any]] = {}
    fresh = secrets.token_hex(8)
    for rules in ("v2", "v1-compat", DEFAULT_LLM_RULES):
        page = 1
        while True:
            body = _get(http, "/api/v1/leaderboard/", all=1, rules=rules, page_size=PAGE, page=page, fresh=fresh)
            for row in body.get("results", []):
                system = row.get("system")
                out[int(row["id"])] = {**row, "system": system.get("id") if isinstance(system, dict) else system}
            if not body.get("next"):
                break
            page += 1
    return out
