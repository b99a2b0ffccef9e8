"""The list's transparency log over HTTP (docs/service.md, "The list's log"): the signed head, entries,
consistency proofs between two sizes, a result's entries with their inclusion proofs, the log key.
Hashes are hex; proofs are RFC 9162's (inclusion: PATH, bottom up; consistency: PROOF)."""

from __future__ import annotations

import json
from typing import Any

from aiperf_runner.spec import translog as spec
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from leaderboard import translog
from leaderboard.models import LogEntry

MAX_ENTRIES = 1000

Head = inline_serializer("TreeHead", {
    "kind": serializers.CharField(), "size": serializers.IntegerField(),
    "root": serializers.CharField(help_text="RFC 9162 root hash of the first `size` entries, hex"),
    "timestamp": serializers.FloatField(help_text="UTC seconds"),
    "key": serializers.CharField(help_text="the log key's fingerprint"),
    "signature": serializers.CharField(help_text="base64 Ed25519 signature of the other fields' canonical JSON")})
ENTRY_FIELDS: dict[str, serializers.Field] = {
    "index": serializers.IntegerField(), "leaf_hash": serializers.CharField(),
    "data": serializers.CharField(help_text="the entry's canonical JSON: the bytes its leaf hash covers"),
    "entry": serializers.DictField(help_text="the same, parsed")}
Problem = inline_serializer("LogProblem", {"detail": serializers.CharField(), "check": serializers.CharField()})


def _bad(detail: str) -> Response:
    return Response({"detail": detail, "check": "log"}, status=status.HTTP_400_BAD_REQUEST)


def _int(request: Any, name: str) -> int | None:
    try:
        return int(request.query_params[name])
    except (KeyError, ValueError):
        return None


def entry_json(row: LogEntry) -> dict[str, Any]:
    return {"index": row.index, "leaf_hash": row.leaf_hash, "data": row.data, "entry": json.loads(row.data)}


class LogKeyView(APIView):
    """The log key: its fingerprint and base64 public key (heads are signed with it)."""

    @extend_schema(responses=inline_serializer("LogKey", {"fingerprint": serializers.CharField(),
                                                          "public_key": serializers.CharField()}))
    def get(self, request):
        return Response(translog.public_key_json())


class LogHeadView(APIView):
    """The latest signed tree head."""

    @extend_schema(responses=Head)
    def get(self, request):
        return Response(translog.head_json(translog.head()))


class LogEntriesView(APIView):
    """Entries [start, end) of the log, at most 1000 at once."""

    @extend_schema(parameters=[OpenApiParameter("start", int, required=True),
                               OpenApiParameter("end", int, description="exclusive; default start + 1000")],
                   responses={200: inline_serializer("LogEntries", {"size": serializers.IntegerField(),
                                                                   "entries": inline_serializer("LogEntry", ENTRY_FIELDS, many=True)}),
                              400: Problem})
    def get(self, request):
        start = _int(request, "start")
        end = _int(request, "end") if "end" in request.query_params else (start or 0) + MAX_ENTRIES
        if start is None or end is None or start < 0 or end < start:
            return _bad("start (and end, if given) must be whole numbers, 0 <= start <= end")
        end = min(end, start + MAX_ENTRIES)
        rows = LogEntry.objects.filter(index__gte=start, index__lt=end).order_by("index")
        return Response({"size": translog.size(), "entries": [entry_json(r) for r in rows]})


class LogConsistencyView(APIView):
    """The RFC 9162 consistency proof between the log at size `first` and at size `second`."""

    @extend_schema(parameters=[OpenApiParameter("first", int, required=True),
                               OpenApiParameter("second", int, description="default: the current size")],
                   responses={200: inline_serializer("LogConsistency", {
                       "first": serializers.IntegerField(), "second": serializers.IntegerField(),
                       "first_root": serializers.CharField(), "second_root": serializers.CharField(),
                       "proof": serializers.ListField(child=serializers.CharField())}), 400: Problem})
    def get(self, request):
        tree = translog.tree()
        first = _int(request, "first")
        second = _int(request, "second") if "second" in request.query_params else tree.size
        if first is None or second is None:
            return _bad("first (and second, if given) must be whole numbers")
        try:
            proof = tree.consistency_proof(first, second)
        except spec.ProofError as exc:
            return _bad(str(exc))
        return Response({"first": first, "second": second, "first_root": tree.root(first).hex(),
                         "second_root": tree.root(second).hex(), "proof": [h.hex() for h in proof]})


class ResultProofView(APIView):
    """A result's entries in the log (the history of its row), each with its inclusion proof against the
    current head; a result the log never held answers 404."""

    @extend_schema(responses={200: inline_serializer("ResultProof", {
        "head": Head, "entries": inline_serializer("ProvenEntry", {
            **ENTRY_FIELDS, "inclusion": serializers.ListField(
                child=serializers.CharField(), help_text="RFC 9162 inclusion path against `head`, hex")}, many=True)}),
        404: Problem})
    def get(self, request, result_id: int):
        head = translog.head()
        rows = list(LogEntry.objects.filter(result_id=result_id, index__lt=head.size).order_by("index"))
        if not rows:
            return Response({"detail": f"the log holds no entry of result {result_id}", "check": "log"},
                            status=status.HTTP_404_NOT_FOUND)
        tree = translog.tree(head.size)
        return Response({"head": translog.head_json(head),
                         "entries": [{**entry_json(r), "inclusion": [h.hex() for h in tree.inclusion_path(
                             r.index, head.size)]} for r in rows]})
