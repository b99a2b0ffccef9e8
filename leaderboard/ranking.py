"""Ranks: by score within a division, over the live list (or a frozen edition).

Ranks are computed when read, over the whole division, so a filtered list (one country, one
vendor) still shows each system's place in the full list. Equal scores share a rank (1, 2, 2, 4).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from leaderboard.models import Edition, EditionEntry, Result


def live_ranks(divisions: list[str] | None = None) -> dict[int, int]:
    """{result id: rank} for the live list, one ranking per division."""
    qs = Result.objects.live()
    if divisions:
        qs = qs.filter(division__in=divisions)
    ranks: dict[int, int] = {}
    current_division, position, last_score, last_rank = None, 0, None, 0
    for pk, division, score in qs.order_by("division", "-score_ops", "pk").values_list("pk", "division", "score_ops"):
        if division != current_division:
            current_division, position, last_score = division, 0, None
        position += 1
        if score != last_score:
            last_rank, last_score = position, score
        ranks[pk] = last_rank
    return ranks


def rank_of(result: Result) -> int | None:
    """The live rank of one result within its division, or None when it is not on the list."""
    if not Result.objects.live().filter(pk=result.pk).exists():
        return None
    return Result.objects.live().filter(division=result.division, score_ops__gt=result.score_ops).count() + 1


def edition_ranks(edition: Edition) -> dict[int, int]:
    return dict(edition.entries.values_list("result_id", "rank"))


@transaction.atomic
def freeze_edition(edition: Edition) -> int:
    """Snapshot the live list into `edition` (ranks and scores as they stand); return the entry count."""
    edition = Edition.objects.select_for_update().get(pk=edition.pk)
    if edition.frozen:
        raise ValueError(f"edition {edition.name} is already frozen")
    ranks = live_ranks()
    results = Result.objects.filter(pk__in=ranks)
    EditionEntry.objects.bulk_create(
        EditionEntry(edition=edition, result=r, division=r.division, rank=ranks[r.pk],
                     score_ops=r.score_ops, regulated_score_ops=r.regulated_score_ops)
        for r in results
    )
    edition.frozen_at = timezone.now()
    edition.save(update_fields=["frozen_at"])
    return len(ranks)
