"""The OpenAPI schema as a reader of the API needs it: a tag per resource, a summary per operation, each
description said once, the public reads marked as needing no token, the schema view in schemaview.py.

drf-spectacular's defaults tag every operation `v1`, give none a summary, repeat a view's docstring on each
of its operations and mark every operation as needing a site token (it cannot read `ReadOnlyOrSite`).
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.openapi import AutoSchema
from rest_framework import permissions

from leaderboard.auth import ReadOnlyOrSite

# What each tag holds (the schema's `tags`, in this order).
TAGS = [
    {"name": "leaderboard", "description": "The ranked list: each system's best result, by division, live or as an "
                                           "edition froze it."},
    {"name": "results", "description": "Every result on the list, with its verification report and trials."},
    {"name": "systems", "description": "The machines results were made on; sites register theirs."},
    {"name": "sites", "description": "The centres that submit."},
    {"name": "editions", "description": "The list as frozen on a date, with its calendar."},
    {"name": "submissions", "description": "Signed bundles uploaded by a site, and where each stands."},
    {"name": "uploads", "description": "Chunked, resumable uploads of a bundle (tus 1.0.0)."},
    {"name": "runs", "description": "Witnessed runs: a run token before the run, receipts for its heartbeats."},
    {"name": "witness", "description": "The service's witness keys."},
    {"name": "keys", "description": "The sites' public keys."},
    {"name": "log", "description": "The list's transparency log: signed tree heads, entries and proofs."},
]
KNOWN_TAGS = {t["name"] for t in TAGS}

# The router's operations: (tag, action) -> summary. Views of their own are summed up by their docstring.
SUMMARIES = {
    ("leaderboard", "list"): "The ranked list", ("leaderboard", "retrieve"): "One row of the ranked list",
    ("results", "list"): "Results on the list", ("results", "retrieve"): "One result with its verification report",
    ("results", "trials"): "A result's trials",
    ("systems", "list"): "Systems", ("systems", "retrieve"): "One system", ("systems", "create"): "Register a system",
    ("sites", "list"): "Sites", ("sites", "retrieve"): "One site",
    ("editions", "list"): "Editions and their calendar", ("editions", "retrieve"): "One edition",
    ("submissions", "list"): "Submissions", ("submissions", "retrieve"): "One submission and where it stands",
    ("submissions", "create"): "Upload a signed bundle",
    ("keys", "list"): "The sites' public keys", ("keys", "retrieve"): "One site key",
    ("keys", "create"): "Register a site key", ("keys", "revoke"): "Revoke a site key",
    ("runs", "create"): "Ask for a run token", ("runs", "heartbeats"): "Send a heartbeat for a receipt",
    ("runs", "receipts"): "A run's receipts",
}


def _first_sentence(text: str) -> str:
    line = " ".join(text.strip().split())
    return re.split(r"(?<=\.)\s", line, maxsplit=1)[0].rstrip(".")


class Schema(AutoSchema):
    def get_tags(self) -> list[str]:
        parts = [p for p in self.path.split("/") if p and not p.startswith("{")]
        # /api/v1/<resource>/...: the resource; /api/v1/results/{id}/proof/ is the log's.
        tag = "log" if parts[-1:] == ["proof"] else (parts[2] if len(parts) > 2 else parts[-1])
        return [tag if tag in KNOWN_TAGS else "other"]

    def _action(self) -> str:
        return str(getattr(self.view, "action", None) or self.method.lower())

    def _own_doc(self) -> str:
        """The docstring of the action's own method (not of its view), if it has one."""
        handler = getattr(self.view, self._action(), None)
        doc = getattr(handler, "__doc__", None) or ""
        view_doc = self.view.__class__.__doc__ or ""
        return "" if doc.strip() == view_doc.strip() else doc

    def get_summary(self) -> str | None:
        action, tag = self._action(), self.get_tags()[0]
        if (tag, action) in SUMMARIES:
            return SUMMARIES[tag, action]
        doc = self._own_doc() or self.view.__class__.__doc__ or ""
        return _first_sentence(doc) if doc.strip() else f"{action.replace('_', ' ').capitalize()} ({tag})"

    def get_description(self) -> str:  # type: ignore[override]
        # A view's docstring once (on its list, or on its only operation), not on every operation it serves.
        own = self._own_doc()
        if own:
            return own.strip()
        if self._action() in ("list", "get") or not hasattr(self.view, "action"):
            return super().get_description()
        return ""

    def get_auth(self) -> list[dict[str, Any]]:
        auths: list[dict[str, Any]] = super().get_auth()
        public_read = self.method in permissions.SAFE_METHODS and all(
            isinstance(p, (ReadOnlyOrSite, permissions.AllowAny)) for p in self.view.get_permissions())
        if public_read and {} not in auths:
            auths.append({})  # no token needed (one still shows a site its own rows)
        return auths


def described_tags(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Postprocessing hook: the tags in their order, each with what it holds."""
    used = {tag for item in result.get("paths", {}).values() for op in item.values() for tag in op.get("tags", [])}
    result["tags"] = [t for t in TAGS if t["name"] in used] + [{"name": t} for t in sorted(used - KNOWN_TAGS)]
    return result
