"""Ranks: the ONE place the service ranks results (docs/service.md, "Ranks and editions").

The live list is split into separately ranked lists by `PARTITION` (the FLOP rules and the division:
`v1-compat` results are never ranked beside `v2` ones). Within a list, by score, equal scores sharing
a rank (1, 2, 2, 4):

- `rank_all`: every live result's place;
- `rank`: the place of each system's best result among the systems' best (TOP500's one entry per
  system: what the list shows by default); NULL for a system's other results.

Both are stored, NULL off the live list, so that every reader (pages, API, exports) reads a column.
`rerank()` recomputes them in a few statements, inside the transaction that changes the list,
wherever the live list or a score changes (the pipeline, publish, withdraw, review, the admin, demo
data, every `migrate`). Freezing an edition copies them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, TypedDict

from aiperf_runner.spec import rules as spec_rules
from aiperf_runner.spec import translog as spec_translog
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, QuerySet, Window
from django.db.models.functions import Rank, RowNumber
from django.utils import timezone

from leaderboard import listcache, translog
from leaderboard.models import Edition, EditionEntry, Result

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class NewRank(TypedDict):
    new_rank: int


Ranked: TypeAlias = "WithAnnotations[Result, NewRank]"

# The fields whose values split the results into separately ranked lists (one definition with the readers'
# recomputation in the list's log: spec/translog.py).
PARTITION = spec_translog.RANKED_APART

# Key of the PostgreSQL advisory lock that makes concurrent reranks take turns.
_RERANK_LOCK = 0x41495046  # "AIPF"


def ranked(results: QuerySet[Result]) -> QuerySet[Ranked]:
    """`results` annotated with `new_rank`: each one's rank among them (the ranking rule, once)."""
    return results.order_by().annotate(
        new_rank=Window(Rank(), partition_by=[F(name) for name in PARTITION], order_by=[F("score_ops").desc()]))


def _ranked_as_the_list(results: QuerySet[Result]) -> list[tuple[int, str, int | None, int | None, float, float]]:
    """(pk, division, rank, rank_all, score, regulated) of a set ranked among itself as the list ranks: `rank_all`
    every result's place, `rank` each system's best (the highest score, the oldest on a tie) among the systems'
    best, None for its other results."""
    best = results.order_by().annotate(n=Window(RowNumber(), partition_by=[F("system_id"), *map(F, PARTITION)],
                                                order_by=[F("score_ops").desc(), F("pk")])).filter(n=1)
    rank = dict(ranked(Result.objects.filter(pk__in=[r.pk for r in best])).values_list("pk", "new_rank"))
    return [(pk, division, rank.get(pk), rank_all, score, regulated) for pk, division, rank_all, score, regulated
            in ranked(results).values_list("pk", "division", "new_rank", "score_ops", "regulated_score_ops")]


def official_rules() -> list[str]:
    """The rules versions admitted to the official ranking (AIPERF_OFFICIAL_RULES; by default the service's own).
    The pipeline lists a result verified under another in the open division (`validity.admitted`)."""
    return list(settings.AIPERF_OFFICIAL_RULES) or [settings.AIPERF_RULES_VERSION or spec_rules.RULES_VERSION]


@transaction.atomic
def rerank() -> int:
    """Store `rank_all` and `rank` of every live result, NULL for every other one; the rows changed.

    Rows whose ranks do not change are not written. On PostgreSQL concurrent calls take turns
    (an advisory lock held to the end of the transaction), so the last one sees every committed change.
    """
    live = Result.objects.live()
    qn = connection.ops.quote_name
    table = qn(Result._meta.db_table)
    differs = "IS DISTINCT FROM" if connection.vendor == "postgresql" else "IS NOT"
    parts = ", ".join(qn(name) for name in PARTITION)
    live_sql, params = live.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_RERANK_LOCK])
        changed = Result.objects.exclude(rank_all=None, rank=None).exclude(pk__in=live.values("pk")).update(
            rank=None, rank_all=None)
        # Django's update() takes no window function: UPDATE ... FROM (SQLite >= 3.33 and PostgreSQL).
        every = (f"SELECT {qn('id')} AS rid, RANK() OVER (PARTITION BY {parts} ORDER BY {qn('score_ops')} DESC) "
                 f"AS new_rank FROM {table} WHERE {qn('id')} IN ({live_sql})")
        cursor.execute(f"UPDATE {table} SET {qn('rank_all')} = r.new_rank FROM ({every}) AS r "
                       f"WHERE {table}.{qn('id')} = r.rid AND {table}.{qn('rank_all')} {differs} r.new_rank", params)
        changed += cursor.rowcount
        # Each system's best result in each list (the highest score; the oldest on a tie), ranked among those.
        best = (f"SELECT {qn('id')} AS bid, {parts}, {qn('score_ops')}, ROW_NUMBER() OVER (PARTITION BY "
                f"{qn('system_id')}, {parts} ORDER BY {qn('score_ops')} DESC, {qn('id')}) AS rn "
                f"FROM {table} WHERE {qn('id')} IN ({live_sql})")
        systems = (f"SELECT b.bid AS rid, RANK() OVER (PARTITION BY {', '.join('b.' + qn(n) for n in PARTITION)} "
                   f"ORDER BY b.{qn('score_ops')} DESC) AS new_rank FROM ({best}) AS b WHERE b.rn = 1")
        cursor.execute(f"UPDATE {table} SET {qn('rank')} = NULL WHERE {qn('rank')} IS NOT NULL AND {qn('id')} "
                       f"NOT IN (SELECT rid FROM ({systems}) AS s)", params)
        changed += cursor.rowcount
        cursor.execute(f"UPDATE {table} SET {qn('rank')} = r.new_rank FROM ({systems}) AS r "
                       f"WHERE {table}.{qn('id')} = r.rid AND {table}.{qn('rank')} {differs} r.new_rank", params)
        changed += cursor.rowcount
    # Even with no rank changed: the caller changed the list (a result's rules, division or score may have
    # moved without moving a rank number). The cached pages are dropped now and at the commit.
    listcache.bump()
    return changed


def live_ranks(all_results: bool = False) -> dict[int, int]:
    """{result id: stored rank} of the live list (`all_results`: `rank_all` of every live result)."""
    field = "rank_all" if all_results else "rank"
    return {pk: rank for pk, rank in Result.objects.live().values_list("pk", field) if rank is not None}


def edition_ranks(edition: Edition) -> dict[int, int]:
    return {pk: rank for pk, rank in edition.entries.values_list("result_id", "rank") if rank is not None}


@transaction.atomic
def freeze_edition(edition: Edition, results: QuerySet[Result] | None = None) -> int:
    """Snapshot the live list into `edition` with its stored ranks and scores; the entry count.

    `results` instead snapshots that set, ranked among itself (demo data's past editions).
    """
    edition = Edition.objects.select_for_update().get(pk=edition.pk)
    if edition.frozen:
        raise ValueError(f"edition {edition.name} is already frozen")
    rows: list[tuple[int, str, int | None, int | None, float, float]]
    if results is None:
        rerank()  # the stored ranks as they stand, whatever changed behind the service's back
        rows = list(Result.objects.live().values_list("pk", "division", "rank", "rank_all", "score_ops",
                                                      "regulated_score_ops"))
    else:
        rows = _ranked_as_the_list(results)
    entries = EditionEntry.objects.bulk_create(
        (EditionEntry(edition=edition, result_id=pk, division=division, rank=rank, rank_all=rank_all, score_ops=score,
                      regulated_score_ops=regulated) for pk, division, rank, rank_all, score, regulated in rows),
        batch_size=2000)
    edition.frozen_at = timezone.now()
    edition.rules_versions = official_rules()
    edition.save(update_fields=["frozen_at", "rules_versions"])  # the save drops the cached pages (listcache's signals)
    translog.record_edition(edition)
    return len(entries)
