"""Where a result stands, in words a reader and its site can act on: on the list (and at which rank), not its
system's best, in review, refused by review, waiting for its audit, withdrawn (when, by whom, why), waiting for
publication, a rehearsal; and what keeps a verified result out of the official division (`not_official_because`,
in the API and `aiperf-runner submit`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Func, JSONField, OuterRef, Subquery

from leaderboard.models import Division, LogEntry, Result, Submission


@dataclass(frozen=True)
class Standing:
    """`state`: live, live_not_best, review_pending, review_rejected, audit_pending, audit_failed, withdrawn,
    unpublished, rehearsal. `since` and `by`, `reason` where the service knows them."""

    state: str
    text: str
    since: datetime | None = None
    by: str = ""
    reason: str = ""

    def brief(self) -> dict[str, str]:
        """What the API says of it: {state, text}."""
        return {"state": self.state, "text": self.text}


def _withdrawal(result: Result, page: PageFacts | None = None) -> tuple[datetime | None, str, str]:
    """(when, by, why) of the result's last withdrawal in the list's log."""
    row = (page.last_entries.get(result.pk) if page is not None else
           LogEntry.objects.filter(result_id=result.pk).order_by("-index").values_list("data", flat=True).first())
    entry = json.loads(row) if row else {}
    if entry.get("event") != "withdrawn":
        return None, "", ""
    at = datetime.fromisoformat(entry["at"]) if entry.get("at") else None
    return at, str(entry.get("by") or ""), str(entry.get("reason") or "")


def _date(at: datetime | None) -> str:
    return at.strftime("%-d %B %Y") if at else "an unknown date"


def _listed_as(result: Result) -> tuple[int, str, str]:
    return (result.system_id, result.division, result.rules)


@dataclass(frozen=True)
class PageFacts:
    """What `standing` reads beyond a result's own row, fetched for a whole page of results at once (the API's
    submissions): each system's ranked result where a live result is not its best, each withdrawn result's last
    entry in the list's log."""

    bests: dict[tuple[int, str, str], tuple[int, int]]
    last_entries: dict[int, str]


def page_facts(results: Iterable[Result]) -> PageFacts:
    """PageFacts of `results` (whose submissions are already read): two queries at most, whatever their number."""
    results = list(results)
    wanted = {_listed_as(r) for r in results if r.rank_all is not None and r.rank is None}
    bests: dict[tuple[int, str, str], tuple[int, int]] = {}
    if wanted:
        rows = (Result.objects.filter(system_id__in={w[0] for w in wanted}).exclude(rank=None)
                .values_list("system_id", "division", "rules", "pk", "rank"))
        bests = {(system, division, rules): (pk, rank) for system, division, rules, pk, rank in rows
                 if rank is not None and (system, division, rules) in wanted}
    withdrawn = [r.pk for r in results if r.submission.status == Submission.Status.WITHDRAWN]
    last_entries: dict[int, str] = {}
    if withdrawn:
        last = LogEntry.objects.filter(result_id=OuterRef("result_id")).order_by("-index").values("index")[:1]
        last_entries = {result_id: data for result_id, data in LogEntry.objects.filter(
            result_id__in=withdrawn, index=Subquery(last)).values_list("result_id", "data") if result_id is not None}
    return PageFacts(bests, last_entries)


def standing(result: Result, page: PageFacts | None = None) -> Standing:
    """The result's place, as its page's banner says it; `page`: `page_facts()` of the page it is on, if any."""
    sub = result.submission
    division = result.get_division_display().lower()
    if sub.rehearsal:
        return Standing("rehearsal", "A rehearsal: verified as the list would, shown to its site only, never ranked.")
    if result.rank_all is not None:  # stored by leaderboard/ranking.py: set on every live result
        if result.rank is not None:
            return Standing("live", f"Rank {result.rank} in the {division} division of the live list.")
        best = (page.bests.get(_listed_as(result)) if page is not None else
                Result.objects.filter(system_id=result.system_id, division=result.division, rules=result.rules)
                .exclude(rank=None).values_list("pk", "rank").first())
        shown = f" The list shows its system's best, result #{best[0]} (rank {best[1]})." if best else ""
        return Standing("live_not_best", f"On the live list, not its system's best result: rank {result.rank_all} "
                                         f"among every {division} result.{shown}")
    if sub.status == Submission.Status.WITHDRAWN:
        at, by, why = _withdrawal(result, page)
        text = f"Withdrawn on {_date(at)}" + (f" by {by}" if by else "") + (f": {why}." if why else ".")
        return Standing("withdrawn", text, at, by, why)
    if result.review == Result.Review.PENDING:
        return Standing("review_pending", f"In review by a list maintainer since {_date(result.verified_at)}: "
                                          f"{result.review_reason or 'its figures need a look'}.",
                        result.verified_at, reason=result.review_reason)
    if result.review == Result.Review.REJECTED:
        return Standing("review_rejected", f"Refused by a list maintainer's review on {_date(result.reviewed_at)}"
                                           + (f" ({result.reviewed_by})" if result.reviewed_by else "")
                                           + f": {result.review_reason or 'no reason given'}.",
                        result.reviewed_at, result.reviewed_by, result.review_reason)
    if result.audit == Result.Audit.PENDING:
        since = sub.challenged_at or result.verified_at
        return Standing("audit_pending", f"Waiting for its audit since {_date(since)}: an official result joins the "
                                         "list once the service has re-executed its work.", since)
    if result.audit == Result.Audit.FAILED:
        return Standing("audit_failed", f"Its audit failed on {_date(result.audited_at)}: "
                                        f"{(result.audit_report or {}).get('message') or 'see the audit below'}.",
                        result.audited_at)
    return Standing("unpublished", "Verified, waiting for a list maintainer to publish it.")


class FailedChecks(Func):
    """The checks of a report (a JSON column) that failed, picked out by the database: a page of 10,000
    submissions then reads a few checks a row instead of every row's whole report (7 kB)."""

    output_field = JSONField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection,
                           template="jsonb_path_query_array(%(expressions)s, '$.checks[*] ? (@.passed == false)')",
                           **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template=(
            "(SELECT json_group_array(json(value)) FROM json_each(%(expressions)s, '$.checks') "
            "WHERE json_extract(value, '$.passed') = 0)"), **extra)


def not_official_because(result: Result, state: Standing | None = None,
                         failed: list[dict[str, Any]] | None = None) -> list[dict[str, str]]:
    """Why a verified result is not (or not yet) in the official ranking: each failed check with its message,
    then what the list still waits for; [] for an official result on the list. `state`: its standing, if known;
    `failed`: its report's failed checks (FailedChecks), if read."""
    if failed is None:
        failed = [c for c in (result.report or {}).get("checks", []) if not c.get("passed")]
    reasons = [{"check": c["name"], "message": c.get("message", "")} for c in failed]
    if result.division == Division.OFFICIAL:
        state = state or standing(result)
        if state.state not in ("live", "live_not_best"):
            reasons.append({"check": f"list.{state.state}", "message": state.text})
    return reasons


def trust_line(result: Result) -> list[tuple[str, str, bool | None]]:
    """(label, value, good) of the trust line, in reading order; good None where it is neither."""
    t: dict[str, Any] = result.trust()
    audit = {"passed": ("audited", True), "pending": ("audit pending", None), "failed": ("audit failed", False),
             "none": ("not audited", False)}[t["audit"] if t["audit"] in ("passed", "pending", "failed") else "none"]
    review = {"approved": ("reviewed: approved", True), "pending": ("in review", None),
              "rejected": ("refused by review", False)}.get(t["review"], ("no review needed", None))
    return [("registered" if t["registered"] else "unregistered", "system", t["registered"]),
            ("witnessed" if t["witnessed"] else "unwitnessed", "run", t["witnessed"]),
            (audit[0], "work", audit[1]), (review[0], "maintainer", review[1])]
