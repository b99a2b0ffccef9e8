"""spec/translog.py against RFC 9162's definitions, written again here from the RFC's text (section 2.1: MTH,
PATH, PROOF) and against pymerkle, an implementation that is not the project's: roots, inclusion paths
and consistency proofs of every size up to 70, and the verifiers refusing what they must."""

from __future__ import annotations

import hashlib
import random

import pytest
from aiperf_runner.spec import translog as t
from pymerkle import InmemoryTree


def H(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def mth(d: list[bytes]) -> bytes:  # RFC 9162 2.1.1, on the entries themselves
    n = len(d)
    if n == 0:
        return H(b"")
    if n == 1:
        return H(b"\x00" + d[0])
    k = 1 << ((n - 1).bit_length() - 1)
    return H(b"\x01" + mth(d[:k]) + mth(d[k:]))


def path(m: int, d: list[bytes]) -> list[bytes]:  # RFC 9162 2.1.3.1
    n = len(d)
    if n == 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    return path(m, d[:k]) + [mth(d[k:])] if m < k else path(m - k, d[k:]) + [mth(d[:k])]


def subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:  # RFC 9162 2.1.4.1
    n = len(d)
    if m == n:
        return [] if b else [mth(d)]
    k = 1 << ((n - 1).bit_length() - 1)
    return subproof(m, d[:k], b) + [mth(d[k:])] if m <= k else subproof(m - k, d[k:], False) + [mth(d[:k])]


@pytest.fixture(scope="module")
def logs() -> list[list[bytes]]:
    rng = random.Random(9162)
    return [[rng.randbytes(rng.randint(0, 40)) for _ in range(n)] for n in range(1, 71)]


def test_roots_paths_and_proofs_are_rfc_9162s(logs: list[list[bytes]]) -> None:
    for d in logs:
        n = len(d)
        tree = t.tree_of([t.leaf_hash(x) for x in d])
        assert tree.root() == mth(d)
        for m in range(n):
            assert tree.inclusion_path(m) == path(m, d)
            assert tree.root(m + 1) == mth(d[:m + 1])
        for m in range(1, n + 1):
            assert tree.consistency_proof(m) == subproof(m, d, True)


def test_an_independent_implementation_agrees(logs: list[list[bytes]]) -> None:
    """pymerkle's roots and inclusion paths (its path starts with the leaf itself)."""
    for d in logs[:40]:
        other = InmemoryTree()
        for x in d:
            other.append_entry(x)
        tree = t.tree_of([t.leaf_hash(x) for x in d])
        assert other.get_root() == tree.root()
        for m in range(len(d)):
            assert other.prove_inclusion(m + 1).path[1:] == tree.inclusion_path(m)


def test_the_verifiers_accept_proofs_and_refuse_forgeries(logs: list[list[bytes]]) -> None:
    for d in logs:
        n = len(d)
        leaves = [t.leaf_hash(x) for x in d]
        tree = t.tree_of(leaves)
        for m in range(n):
            p = tree.inclusion_path(m)
            t.verify_inclusion(m, n, leaves[m], p, tree.root())
            with pytest.raises(t.ProofError):
                t.verify_inclusion(m, n, t.leaf_hash(b"forged"), p, tree.root())
            if p:
                with pytest.raises(t.ProofError):
                    t.verify_inclusion(m, n, leaves[m], p[:-1], tree.root())
        for m in range(1, n + 1):
            proof = tree.consistency_proof(m)
            t.verify_consistency(m, n, tree.root(m), tree.root(), proof)
            forked = t.tree_of([*leaves[:m - 1], t.leaf_hash(b"rewritten"), *leaves[m:]])
            with pytest.raises(t.ProofError):  # a log whose first m entries changed is not consistent with them
                t.verify_consistency(m, n, tree.root(m), forked.root(), proof)


def test_appended_nodes_make_the_same_tree(logs: list[list[bytes]]) -> None:
    """What the service stores as it appends (each complete subtree once) gives the in-memory tree's hashes."""
    d = logs[-1]
    stored: dict[tuple[int, int], bytes] = {}
    for i, x in enumerate(d):
        for level, index, value in t.new_nodes(i, t.leaf_hash(x), lambda lv, ix: stored[(lv, ix)]):
            stored[(level, index)] = value
        grown = t.Tree(i + 1, lambda lv, ix: stored[(lv, ix)])
        assert grown.root() == mth(d[:i + 1])
    assert t.Tree(len(d), lambda lv, ix: stored[(lv, ix)]).inclusion_path(37) == path(37, d)


def test_the_list_is_recomputed_from_rows() -> None:
    rows = {1: {"id": 1, "live": True, "rules": "v2", "division": "official", "score_ops": 5.0},
            2: {"id": 2, "live": True, "rules": "v2", "division": "official", "score_ops": 7.0},
            3: {"id": 3, "live": True, "rules": "v2", "division": "official", "score_ops": 5.0},
            4: {"id": 4, "live": False, "rules": "v2", "division": "official", "score_ops": 9.0},
            5: {"id": 5, "live": True, "rules": "v2", "division": "open", "score_ops": 1.0}}
    listed = t.listed_from_rows(rows)
    assert {pk: r["rank_all"] for pk, r in listed.items()} == {2: 1, 1: 2, 3: 2, 5: 1}
    published = {pk: dict(r) for pk, r in listed.items()}
    assert t.list_problems(listed, published) == []
    published[2]["score_ops"] = 70.0
    del published[5]
    problems = t.list_problems(listed, published)
    assert any("result 5 is listed by the log but not on the list" in p for p in problems)
    assert any(p.startswith("result 2: score_ops is 70.0 on the list, 7.0 in the log") for p in problems)
