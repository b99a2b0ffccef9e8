"""Ranks: the ONE place the service ranks results (docs/service.md, "Ranks and editions").

A result's rank is its place by score within its list (`PARTITION`: the division), over the live
list; equal scores share a rank (1, 2, 2, 4). Ranks are stored (`Result.rank`, NULL off the live
list) so that every reader — pages, API, exports — reads a column instead of ranking per request,
and a filtered list (one country, one vendor) still shows each result's place in its whole list.

`rerank()` recomputes the stored ranks in one statement; it is called, inside the transaction that
changes them, wherever the live list or a score changes: a result stored or rejected by the
pipeline, published, withdrawn, changed in the admin, demo data written. Freezing an edition copies
the stored ranks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, TypedDict

from django.db import connection, transaction
from django.db.models import F, QuerySet, Window
from django.db.models.functions import Rank
from django.utils import timezone

from leaderboard.models import Edition, EditionEntry, Result

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class NewRank(TypedDict):
    new_rank: int


Ranked: TypeAlias = "WithAnnotations[Result, NewRank]"

# The fields whose values split the results into separately ranked lists: adding one (the FLOP rules,
# say) is this one line.
PARTITION = ("division",)

# Key of the PostgreSQL advisory lock that makes concurrent reranks take turns.
_RERANK_LOCK = 0x41495046  # "AIPF"


def ranked(results: QuerySet[Result]) -> QuerySet[Ranked]:
    """`results` annotated with `new_rank`: each one's rank among them (the ranking rule, once)."""
    return results.order_by().annotate(
        new_rank=Window(Rank(), partition_by=[F(name) for name in PARTITION], order_by=[F("score_ops").desc()]))


@transaction.atomic
def rerank() -> int:
    """Store the rank of every result on the live list, and NULL for every other one; the rows changed.

    Rows whose rank does not change are not written. On PostgreSQL concurrent calls take turns
    (an advisory lock held to the end of the transaction), so the last one sees every committed change.
    """
    live = Result.objects.live()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_RERANK_LOCK])
        changed = Result.objects.exclude(rank=None).exclude(pk__in=live.values("pk")).update(rank=None)
        # Django's update() takes no window function; one UPDATE ... FROM keeps this one statement
        # however long the list (SQLite >= 3.33 and PostgreSQL both have it).
        inner, params = ranked(live).annotate(rid=F("pk")).values("rid", "new_rank").query.sql_with_params()
        qn = connection.ops.quote_name
        table, rank = qn(Result._meta.db_table), qn("rank")
        differs = "IS DISTINCT FROM" if connection.vendor == "postgresql" else "IS NOT"
        cursor.execute(f"UPDATE {table} SET {rank} = r.new_rank FROM ({inner}) AS r "
                       f"WHERE {table}.{qn('id')} = r.rid AND {table}.{rank} {differs} r.new_rank", params)
        return changed + cursor.rowcount


def live_ranks() -> dict[int, int]:
    """{result id: stored rank} of the live list."""
    return {pk: rank for pk, rank in Result.objects.live().values_list("pk", "rank") if rank is not None}


def edition_ranks(edition: Edition) -> dict[int, int]:
    return dict(edition.entries.values_list("result_id", "rank"))


@transaction.atomic
def freeze_edition(edition: Edition, results: QuerySet[Result] | None = None) -> int:
    """Snapshot the live list into `edition` with its stored ranks and scores; the entry count.

    `results` instead snapshots that set, ranked among itself (demo data's past editions).
    """
    edition = Edition.objects.select_for_update().get(pk=edition.pk)
    if edition.frozen:
        raise ValueError(f"edition {edition.name} is already frozen")
    rows: list[tuple[int, str, int, float, float]]
    if results is None:
        rerank()  # the stored ranks as they stand, whatever changed behind the service's back
        live = Result.objects.live().values_list("pk", "division", "rank", "score_ops", "regulated_score_ops")
        rows = [(pk, division, rank, score, regulated) for pk, division, rank, score, regulated in live
                if rank is not None]
    else:
        rows = list(ranked(results).values_list("pk", "division", "new_rank", "score_ops", "regulated_score_ops"))
    entries = EditionEntry.objects.bulk_create(
        (EditionEntry(edition=edition, result_id=pk, division=division, rank=rank, score_ops=score,
                      regulated_score_ops=regulated) for pk, division, rank, score, regulated in rows),
        batch_size=2000)
    edition.frozen_at = timezone.now()
    edition.save(update_fields=["frozen_at"])
    return len(entries)
