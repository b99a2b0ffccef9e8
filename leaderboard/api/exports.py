"""The whole-list exports (`?format=csv` / `?format=json`) of the submissions and of the ranked list (leaderboard,
results), written from rows of `values()`.

The same rows as SubmissionSerializer and LeaderboardEntrySerializer write (tests/web/test_api_export_rows.py
holds them equal), without a model object per row, site, system and result: making 30,000 of them took half of a
10,000-row export's time. Each result's standing comes from `standing.Facts` of its row, so the export and the
pages judge it alike.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, QuerySet
from django.utils import timezone as dj_timezone

from leaderboard import standing
from leaderboard.models import Evidence, Result, Site, StateEvidence, Submission, trust_line, wanted_state_list
from leaderboard.standing import Facts

from .serializers import PRIVATE_MESSAGE, _float, _int, _iso, result_page_url

_SUBMISSION = ("id", "status", "site_id", "run_id", "sha256", "size", "created_at", "verified_at", "reasons",
               "error", "challenge", "challenged_at", "rehearsal", "proof")
_OBJECTS = ("reasons", "proof")  # read only for the fields of lists of objects
_ZERO = timedelta(0)
_RESULT = ("score_ops", "regulated_score_ops", "audit", "verification_level")


def submission_rows(queryset: QuerySet[Submission], request: Any, objects: bool = True) -> list[dict[str, Any]]:
    """Every submission of `queryset` (filtered and ordered) as the list's row, as `request`'s client sees it.
    `objects`: whether to write the fields that hold lists of objects (reasons, states, not_official_because)
    or leave them empty; a CSV has no column for them (renderers._flatten), so its export need not read them."""
    columns = _SUBMISSION if objects else tuple(c for c in _SUBMISSION if c not in _OBJECTS)
    facts_columns = Facts.columns()
    if not objects:
        del facts_columns["f_failed_checks"]
    rows = list(queryset.select_related(None).prefetch_related(None).values(
        *columns, **{f"r_{c}": F(f"result__{c}") for c in _RESULT}, **facts_columns))
    ids = queryset.values("id")  # a subquery: 10,000 ids as parameters cost more to send than the rows
    sites = {pk: {"id": pk, "name": name, "country": country}
             for pk, name, country in Site.objects.values_list("pk", "name", "country")}
    evidence = _by_submission(Evidence.objects.filter(submission_id__in=ids).values_list("submission_id", "trial"))
    states = _by_submission(StateEvidence.objects.filter(submission_id__in=ids).values_list("submission_id", "sha256"))
    facts = {row["id"]: Facts.from_row(row) for row in rows if row["f_pk"] is not None}
    page = standing.page_facts(facts.values())
    iso = _iso_writer()
    auth = getattr(request, "auth", None)
    own_site = auth.pk if isinstance(auth, Site) else None
    return [_row(row, facts.get(row["id"]), page, sites[row["site_id"]], evidence.get(row["id"], []),
                 states.get(row["id"], []), request, own_site, iso, objects) for row in rows]


def _iso_writer() -> Callable[[datetime | None], str | None]:
    """serializers._iso, with the service's time zone looked up once per export rather than per date."""
    if dj_timezone.get_current_timezone_name() != "UTC":
        return _iso

    def utc_iso(value: datetime | None) -> str | None:
        if value is None:
            return None
        return value.replace(tzinfo=None).isoformat() + "Z" if value.utcoffset() == _ZERO else _iso(value)
    return utc_iso


def _by_submission(pairs: Iterable[tuple[int, str]]) -> dict[int, list[str]]:
    held: defaultdict[int, list[str]] = defaultdict(list)
    for submission_id, value in pairs:
        held[submission_id].append(value)
    return {k: sorted(v) for k, v in held.items()}


def _row(row: dict[str, Any], facts: Facts | None, page: standing.PageFacts, site: dict[str, Any],
         evidence: list[str], states: list[str], request: Any, own_site: int | None,
         _iso: Callable[[datetime | None], str | None], objects: bool) -> dict[str, Any]:
    state = standing.standing(facts, page) if facts else None
    mine = own_site == row["site_id"]
    return {
        "id": row["id"], "status": row["status"], "site": site, "run_id": row["run_id"], "sha256": row["sha256"],
        "size": row["size"], "created_at": _iso(row["created_at"]), "verified_at": _iso(row["verified_at"]),
        "reasons": row.get("reasons", []) if mine else [{"check": r.get("check", ""), "message": PRIVATE_MESSAGE}
                                                        for r in row.get("reasons", [])],
        "error": row["error"] if mine else "",
        "result": facts.pk if facts else None,
        "url": result_page_url(request, facts.pk) if facts and not row["rehearsal"] else None,
        "score_ops": _float(row["r_score_ops"]) if facts else None,
        "regulated_score_ops": _float(row["r_regulated_score_ops"]) if facts else None,
        "division": facts.division if facts else None, "rank": _int(facts.rank) if facts else None,
        "rank_all": _int(facts.rank_all) if facts else None,
        "verification_level": row["r_verification_level"] if facts else None, "challenge": row["challenge"],
        "challenged_at": _iso(row["challenged_at"]), "evidence": evidence,
        "states": wanted_state_list(row.get("proof")),
        "states_received": states, "audit": row["r_audit"] if facts else None,
        "audit_note": facts.audit_message if facts else "", "rehearsal": row["rehearsal"],
        "standing": state.brief() if state else None,
        "not_official_because": standing.not_official_because(facts, state) if facts and objects else [],
    }


_ENTRY = ("id", "list_rank", "rank_all", "division", "rules", "review", "site_id", "system_id", "score_ops",
          "regulated_score_ops", "max_accuracy", "efficiency", "peak_flops", "duration_s", "precision", "preset",
          "verification_level", "rules_version", "verifier_version", "verified_at", "witnessed", "audit", "workload",
          "best_loss")
_ENTRY_RELATED = {f"s_{c}": F(f"site__{c}") for c in ("name", "country")} | {
    f"y_{c}": F(f"system__{c}") for c in ("name", "vendor", "accelerator_model", "accelerator_count", "nodes",
                                          "interconnect", "registered", "status")}


def leaderboard_rows(queryset: QuerySet[Result], request: Any) -> list[dict[str, Any]]:
    """Every result of `queryset` (the ranked list, filtered, ordered, with its `list_rank`) as
    LeaderboardEntrySerializer's row, key for key."""
    iso = _iso_writer()
    return [{
        "rank": row["list_rank"], "rank_all": _int(row["rank_all"]), "id": row["id"],
        "url": result_page_url(request, row["id"]), "division": row["division"], "rules": row["rules"],
        "review": row["review"],
        "site": {"id": row["site_id"], "name": row["s_name"], "country": row["s_country"]},
        "system": {"id": row["system_id"], "name": row["y_name"], "vendor": row["y_vendor"],
                   "accelerator_model": row["y_accelerator_model"], "accelerator_count": row["y_accelerator_count"],
                   "nodes": row["y_nodes"], "interconnect": row["y_interconnect"]},
        "score_ops": _float(row["score_ops"]), "regulated_score_ops": _float(row["regulated_score_ops"]),
        "max_accuracy": _float(row["max_accuracy"]), "efficiency": _float(row["efficiency"]),
        "peak_flops": _float(row["peak_flops"]), "duration_s": _float(row["duration_s"]),
        "precision": row["precision"], "preset": row["preset"], "verification_level": row["verification_level"],
        "rules_version": row["rules_version"], "verifier_version": row["verifier_version"],
        "verified_at": iso(row["verified_at"]),
        "trust": trust_line(row["y_registered"], row["y_status"], row["witnessed"], row["audit"], row["review"]),
        "workload": row["workload"], "best_loss": _float(row["best_loss"]),
    } for row in queryset.values(*_ENTRY, **_ENTRY_RELATED)]
