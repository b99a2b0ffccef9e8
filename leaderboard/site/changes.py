"""The list's log on the site (docs/service.md, "The list's log"): the public `/changes` page, newest
first, and a result's own history for its page."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from leaderboard import listcache, translog
from leaderboard.models import LogEntry
from leaderboard.site import format as fmt

PAGE = 100


def _line(row: LogEntry) -> dict[str, Any]:
    entry = json.loads(row.data)
    result = entry.get("result") or {}
    edition = entry.get("edition") or {}
    return {"index": row.index, "at": _when(datetime.fromisoformat(entry["at"])) if entry.get("at") else "–",
            "event": str(entry.get("event", "")).replace("_", " "), "by": entry.get("by") or "",
            "reason": entry.get("reason") or "", "result": result.get("id"),
            "result_url": reverse("result", args=[result["id"]]) if result.get("id") and result.get("live") else None,
            "edition": edition.get("name"), "score": fmt.ops(result["score_ops"]) if "score_ops" in result else "",
            "division": result.get("division", ""), "live": result.get("live")}


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def history(result_id: int) -> list[dict[str, Any]]:
    """A result's entries, oldest first."""
    return [_line(r) for r in LogEntry.objects.filter(result_id=result_id).order_by("index")]


def head_facts() -> dict[str, Any]:
    head = translog.head()
    fingerprint, _ = translog.public_key()
    return {"size": head.size, "root": head.root,
            "signed": _when(datetime.fromtimestamp(head.timestamp, tz=UTC)), "key": fingerprint}


@listcache.cached_page("site")
def changes(request: HttpRequest) -> HttpResponse:
    try:
        before = int(request.GET.get("before", ""))
    except ValueError:
        before = None
    rows = LogEntry.objects.order_by("-index")
    if before is not None:
        rows = rows.filter(index__lt=before)
    page = [_line(r) for r in rows[:PAGE]]
    older = page[-1]["index"] if page and page[-1]["index"] > 0 else None
    return render(request, "site/changes.html", {"head": head_facts(), "lines": page, "older": older,
                                                 "nav": "changes"})
