"""Where a result stands, in words a reader and its site can act on: on the list (and at which rank), not its
system's best, in review, refused by review, waiting for its audit, withdrawn (when, by whom, why), waiting for
publication, a rehearsal; and what keeps a verified result out of the official division (`not_official_because`,
in the API and `aiperf-runner submit`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiperf_runner.spec import llmtrust
from django.conf import settings
from django.db.models import F, OuterRef, Subquery
from django.db.models.fields.json import KeyTextTransform

from leaderboard.models import Division, LogEntry, Result, Submission, failed_of


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


@dataclass(frozen=True)
class Facts:
    """What `standing` reads of a result and its submission, taken from a Result (`of`) or from a row of
    `values(*Facts.columns())` (`from_row`: an export of thousands of rows, without making their model objects),
    so that both are judged by the one function."""

    pk: int
    system_id: int
    division: str
    rules: str
    rank: int | None
    rank_all: int | None
    review: str
    review_reason: str
    reviewed_at: datetime | None
    reviewed_by: str
    audit: str
    audited_at: datetime | None
    audit_message: str
    verified_at: datetime | None
    rehearsal: bool
    status: str
    challenged_at: datetime | None
    workload: str = "image"
    preset: str = ""
    failed_checks: list[dict[str, Any]] | None = None  # read by not_official_because; None: not read

    _RESULT = ("system_id", "division", "rules", "rank", "rank_all", "review", "review_reason", "reviewed_at",
               "reviewed_by", "audit", "audited_at", "verified_at", "workload", "preset")

    @classmethod
    def of(cls, result: Result) -> Facts:
        sub = result.submission
        return cls(**{name: getattr(result, name) for name in cls._RESULT}, pk=result.pk,
                   audit_message=str((result.audit_report or {}).get("message") or ""), rehearsal=sub.rehearsal,
                   status=sub.status, challenged_at=sub.challenged_at)

    @classmethod
    def columns(cls, prefix: str = "result__") -> dict[str, Any]:
        """{alias: expression} for `values(**...)` of a Submission queryset (`prefix`: the path from it to its
        result); the audit's message is picked out of its report by the database."""
        return {"f_pk": F(f"{prefix}id"), **{f"f_{name}": F(prefix + name) for name in cls._RESULT},
                "f_audit_message": KeyTextTransform("message", f"{prefix}audit_report"), "f_rehearsal": F("rehearsal"),
                "f_status": F("status"), "f_challenged_at": F("challenged_at"),
                "f_failed_checks": F(f"{prefix}failed_checks")}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Facts:
        return cls(**{name: row[f"f_{name}"] for name in cls._RESULT}, pk=row["f_pk"],
                   audit_message=str(row["f_audit_message"] or ""), rehearsal=row["f_rehearsal"],
                   status=row["f_status"], challenged_at=row["f_challenged_at"],
                   failed_checks=row.get("f_failed_checks"))


def _withdrawal(result: Facts, page: PageFacts | None = None) -> tuple[datetime | None, str, str]:
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


def _listed_as(result: Facts) -> tuple[int, str, str]:
    return (result.system_id, result.division, result.rules)


@dataclass(frozen=True)
class PageFacts:
    """What `standing` reads beyond a result's own row, fetched for a whole page of results at once (the API's
    submissions): each system's ranked result where a live result is not its best, each withdrawn result's last
    entry in the list's log."""

    bests: dict[tuple[int, str, str], tuple[int, int]]
    last_entries: dict[int, str]


def page_facts(results: Iterable[Result | Facts]) -> PageFacts:
    """PageFacts of `results` (whose submissions are already read): two queries at most, whatever their number."""
    facts = [_facts(r) for r in results]
    wanted = {_listed_as(r) for r in facts if r.rank_all is not None and r.rank is None}
    bests: dict[tuple[int, str, str], tuple[int, int]] = {}
    if wanted:
        rows = (Result.objects.filter(system_id__in={w[0] for w in wanted}).exclude(rank=None)
                .values_list("system_id", "division", "rules", "pk", "rank"))
        bests = {(system, division, rules): (pk, rank) for system, division, rules, pk, rank in rows
                 if rank is not None and (system, division, rules) in wanted}
    withdrawn = [r.pk for r in facts if r.status == Submission.Status.WITHDRAWN]
    last_entries: dict[int, str] = {}
    if withdrawn:
        last = LogEntry.objects.filter(result_id=OuterRef("result_id")).order_by("-index").values("index")[:1]
        last_entries = {result_id: data for result_id, data in LogEntry.objects.filter(
            result_id__in=withdrawn, index=Subquery(last)).values_list("result_id", "data") if result_id is not None}
    return PageFacts(bests, last_entries)


def _failed(result: Result) -> list[dict[str, Any]]:
    """A Result's failed checks: from its report where that was read (a page of one result), else as stored."""
    return failed_of(result.report) if "report" in result.__dict__ else result.failed_checks


def _facts(result: Result | Facts) -> Facts:
    return result if isinstance(result, Facts) else Facts.of(result)


def standing(result: Result | Facts, page: PageFacts | None = None) -> Standing:
    """The result's place, as its page's banner says it; `page`: `page_facts()` of the page it is on, if any."""
    result = _facts(result)
    division = Division(result.division).label.lower()
    if result.rehearsal:
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
    if result.status == Submission.Status.WITHDRAWN:
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
        since = result.challenged_at or result.verified_at
        return Standing("audit_pending", f"Waiting for its audit since {_date(since)}: an official result joins the "
                                         "list once the service has re-executed its work.", since)
    if result.audit == Result.Audit.FAILED:
        return Standing("audit_failed", f"Its audit failed on {_date(result.audited_at)}: "
                                        f"{result.audit_message or 'see the audit below'}.",
                        result.audited_at)
    return Standing("unpublished", "Verified, waiting for a list maintainer to publish it.")


def preset_problem(result: Result | Facts) -> str | None:
    """Why an AIPerf-LLM result is open for its preset alone: its division takes the preset, which no check of its
    report measures (spec/llmtrust.py). An LLM result's rules_version names its FLOP rules, so the presets admitted
    are those of the service's rules."""
    if result.workload != "llm" or result.division == Division.OFFICIAL:
        return None
    return llmtrust.preset_problem(result.preset, settings.AIPERF_RULES_VERSION or None)


def not_official_because(result: Result | Facts, state: Standing | None = None) -> list[dict[str, str]]:
    """Why a verified result is not (or not yet) in the official ranking: each failed check with its message,
    then what the list still waits for; [] for an official result on the list. `state`: its standing, if known."""
    failed = (result.failed_checks or []) if isinstance(result, Facts) else _failed(result)
    reasons = [{"check": c["name"], "message": c.get("message", "")} for c in failed]
    problem = preset_problem(result)
    if problem and not any(r["check"] == "validity.preset" for r in reasons):
        reasons.append({"check": "validity.preset", "message": problem})
    if result.division == Division.OFFICIAL:
        state = state or standing(result)
        if state.state not in ("live", "live_not_best"):
            reasons.append({"check": f"list.{state.state}", "message": state.text})
    return reasons


def trust_line(result: Result) -> list[tuple[str, str, bool | None]]:
    """(label, value, good) of the trust line, in reading order; good None where it is neither."""
    t: dict[str, Any] = result.trust()
    audit = {"passed": ("audited", True), "pending": ("audit pending", None), "failed": ("audit failed", False),
             "demo": ("demo data: nothing to audit", None)}.get(t["audit"], ("not audited", False))
    review = {"approved": ("reviewed: approved", True), "pending": ("in review", None),
              "rejected": ("refused by review", False)}.get(t["review"], ("no review needed", None))
    return [("registered" if t["registered"] else "unregistered", "system", t["registered"]),
            ("witnessed" if t["witnessed"] else "unwitnessed", "run", t["witnessed"]),
            (audit[0], "work", audit[1]), (review[0], "maintainer", review[1])]
