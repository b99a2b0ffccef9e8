"""The HTML pages. Minimal for now: the ranked list ("/") and a result page ("/results/<id>")."""

from __future__ import annotations

from django.db.models import Q
from django.shortcuts import get_object_or_404, render

from leaderboard import ranking
from leaderboard.models import EditionEntry, Result


def leaderboard(request):
    results = list(Result.objects.live().select_related("site", "system").order_by("division", "-score_ops", "pk"))
    ranks = ranking.live_ranks()
    for r in results:
        r.rank = ranks.get(r.pk)
    return render(request, "leaderboard/list.html", {"results": results})


def result(request, pk: int):
    visible = Q(pk__in=Result.objects.live().values("pk")) | Q(pk__in=EditionEntry.objects.values("result_id"))
    obj = get_object_or_404(Result.objects.select_related("site", "system", "submission", "series").filter(visible),
                            pk=pk)
    return render(request, "leaderboard/result.html", {"result": obj, "rank": ranking.rank_of(obj),
                                                        "checks": obj.report.get("checks", [])})
