"""The list's transparency log: an append-only Merkle tree as RFC 9162 (Certificate Transparency 2.0)
defines it, with SHA-256, and the tree heads the service signs (docs/service.md, "The list's log").

- Hashes: a leaf is SHA-256(0x00 || entry), an inner node SHA-256(0x01 || left || right); the tree
  of n leaves splits at the largest power of two below n (RFC 9162 section 2.1.1).
- `Tree`: the hashes of a log, read through `subtree(level, index)`, the root of the complete
  subtree of 2**level leaves starting at leaf index * 2**level. Complete subtrees never change in an
  append-only log, so a store keeps each once (the service: a table; a client: a list of leaves).
  It gives the root of any earlier size, inclusion paths (PATH) and consistency proofs (PROOF).
- `verify_inclusion`, `verify_consistency`: RFC 9162 sections 2.1.3.2 and 2.1.4.2, for readers.
- A tree head is a statement {kind, size, root, timestamp, key} signed by the log key (Ed25519 over
  its canonical JSON, as the witness signs receipts); `entry_bytes` is an entry's canonical JSON.

Torch-free and Django-free: the service appends and proves, `aiperf-runner check-list` verifies.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

HEAD_KIND = "aiperf-tree-head/1"
EMPTY_ROOT = hashlib.sha256(b"").digest()


class ProofError(ValueError):
    """A proof that does not verify (or could not be for these sizes)."""


def entry_bytes(entry: Mapping[str, Any]) -> bytes:
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def new_nodes(index: int, leaf: bytes, subtree: Callable[[int, int], bytes]) -> list[tuple[int, int, bytes]]:
    """The complete subtrees that appending leaf `index` (0-based) completes: (level, index, hash), the leaf
    first. `subtree` reads those stored before (each left sibling)."""
    out = [(0, index, leaf)]
    level, at, value = 0, index, leaf
    while at % 2 == 1:  # a right child: its parent is complete now
        value = node_hash(subtree(level, at - 1), value)
        level, at = level + 1, at // 2
        out.append((level, at, value))
    return out


class Tree:
    """The hashes of a log of `size` leaves, read from its complete subtrees."""

    def __init__(self, size: int, subtree: Callable[[int, int], bytes]) -> None:
        self.size = size
        self.subtree = subtree

    def root(self, size: int | None = None) -> bytes:
        n = self.size if size is None else size
        if not 0 <= n <= self.size:
            raise ProofError(f"no tree of size {n}: the log has {self.size} entries")
        return self._hash(0, n) if n else EMPTY_ROOT

    def _hash(self, start: int, end: int) -> bytes:
        """MTH of leaves [start, end): complete aligned subtrees read, the rest computed (RFC 9162 2.1.1)."""
        width = end - start
        if width & (width - 1) == 0 and start % width == 0:
            return self.subtree(width.bit_length() - 1, start // width)
        k = _split(width)
        return node_hash(self._hash(start, start + k), self._hash(start + k, end))

    def inclusion_path(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[size]) of RFC 9162 2.1.3.1, bottom up."""
        n = self.size if size is None else size
        if not 0 <= index < n <= self.size:
            raise ProofError(f"no leaf {index} in a tree of size {n}")
        return self._path(index, 0, n)

    def _path(self, m: int, start: int, end: int) -> list[bytes]:
        if end - start == 1:
            return []
        k = _split(end - start)
        if m < k:
            return [*self._path(m, start, start + k), self._hash(start + k, end)]
        return [*self._path(m - k, start + k, end), self._hash(start, start + k)]

    def consistency_proof(self, first: int, second: int | None = None) -> list[bytes]:
        """PROOF(first, D[second]) of RFC 9162 2.1.4.1."""
        n = self.size if second is None else second
        if not 0 < first <= n <= self.size:
            raise ProofError(f"no consistency proof from size {first} to {n} (the log has {self.size} entries)")
        return self._subproof(first, 0, n, True)

    def _subproof(self, m: int, start: int, end: int, whole: bool) -> list[bytes]:
        n = end - start
        if m == n:
            return [] if whole else [self._hash(start, end)]
        k = _split(n)
        if m <= k:
            return [*self._subproof(m, start, start + k, whole), self._hash(start + k, end)]
        return [*self._subproof(m - k, start + k, end, False), self._hash(start, start + k)]


def tree_of(leaves: Sequence[bytes]) -> Tree:
    """A tree over leaf hashes held in memory (a reader's copy of the log), its subtrees memoised."""
    memo: dict[tuple[int, int], bytes] = {}

    def subtree(level: int, index: int) -> bytes:
        if level == 0:
            return leaves[index]
        key = (level, index)
        if key not in memo:
            memo[key] = node_hash(subtree(level - 1, 2 * index), subtree(level - 1, 2 * index + 1))
        return memo[key]

    return Tree(len(leaves), subtree)


# ---- verification (RFC 9162 2.1.3.2 and 2.1.4.2) -------------------------------------------------------------
def verify_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes], root: bytes) -> None:
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            raise ProofError("the inclusion path is longer than the tree is deep")
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or r != root:
        raise ProofError(f"leaf {index} is not included in the tree of size {size} with this root")


def verify_consistency(first: int, second: int, first_root: bytes, second_root: bytes,
                       proof: Sequence[bytes]) -> None:
    if not 0 < first <= second:
        raise ProofError(f"no consistency between sizes {first} and {second}")
    if first == second:
        if proof or first_root != second_root:
            raise ProofError(f"two different trees of size {first}")
        return
    path = list(proof)
    if first & (first - 1) == 0:  # a power of two: the first tree is a subtree, its root the path's start
        path = [first_root, *path]
    if not path:
        raise ProofError("an empty consistency proof")
    fn, sn = first - 1, second - 1
    while fn % 2 == 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is longer than the tree is deep")
        if fn % 2 == 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or fr != first_root or sr != second_root:
        raise ProofError(f"the tree of size {second} does not extend the tree of size {first}: the log was forked "
                         "or rewritten")


def head_statement(size: int, root: bytes, timestamp: float, key: str) -> dict[str, Any]:
    return {"kind": HEAD_KIND, "size": size, "root": root.hex(), "timestamp": timestamp, "key": key}


# ---- the list as the log states it -------------------------------------------------------------------------
COMPARED = ("division", "rules", "score_ops", "regulated_score_ops", "max_accuracy", "system")
"""The figures of a listed result that must be what the log says (and its place, rank_all)."""
RANKED_APART = ("rules", "division")
"""The fields whose values split the live list into separately ranked lists (the service's ranking,
leaderboard/ranking.py, partitions by these; a reader recomputes `rank_all` with them)."""


def rows_from_entries(entries: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each result's row as the log last states it (a removed result's says removed)."""
    rows: dict[int, dict[str, Any]] = {}
    for entry in entries:
        row = entry.get("result")
        if isinstance(row, Mapping) and isinstance(row.get("id"), int):
            rows[row["id"]] = dict(row)
    return rows


def listed_from_rows(rows: Mapping[int, Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    """The live list the rows make: every live row with its `rank_all`, ranked within its rules and division
    by score (equal scores share a place: 1, 2, 2, 4), as the service ranks (leaderboard/ranking.py)."""
    live = {pk: dict(row) for pk, row in rows.items() if row.get("live")}
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in live.values():
        groups.setdefault(tuple(row.get(f) for f in RANKED_APART), []).append(row)
    for members in groups.values():
        members.sort(key=lambda r: -float(r["score_ops"]))
        for place, row in enumerate(members, 1):
            before = members[place - 2] if place > 1 else None
            row["rank_all"] = before["rank_all"] if before and before["score_ops"] == row["score_ops"] else place
    return live


def list_problems(logged: Mapping[int, Mapping[str, Any]], published: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """How the published list (result id -> its API row: system as an id) differs from the log's."""
    out = []
    for pk in sorted(set(published) - set(logged)):
        out.append(f"result {pk} is on the list but the log does not list it (added or changed without a log entry)")
    for pk in sorted(set(logged) - set(published)):
        out.append(f"result {pk} is listed by the log but not on the list (removed or hidden without a log entry)")
    for pk in sorted(set(logged) & set(published)):
        for field in (*COMPARED, "rank_all"):
            if logged[pk].get(field) != published[pk].get(field):
                out.append(f"result {pk}: {field} is {published[pk].get(field)!r} on the list, "
                           f"{logged[pk].get(field)!r} in the log")
    return out
