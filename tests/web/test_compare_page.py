"""`/compare?systems=...`: two to four systems side by side, from the list's own figures."""

from __future__ import annotations

import html

import pytest

from leaderboard.models import EditionEntry, Result
from leaderboard.site import format as fmt

pytestmark = pytest.mark.django_db


def test_two_systems_side_by_side(client, demo_data):
    demo_data(80)
    a, b = (Result.objects.entries().filter(division="official").order_by("-score_ops")
            .select_related("system")[:2])
    page = html.unescape(client.get(f"/compare?systems={a.system_id},{b.system_id},{a.system_id}").content.decode())
    assert "2 systems compared" in page
    for r in (a, b):
        assert f'href="/systems/{r.system_id}"' in page and fmt.ops(r.score_ops) in page
        assert f'href="/results/{r.pk}"' in page
    assert f"<td class=\"num\">{a.rank}</td>" in page
    ranked = EditionEntry.objects.filter(result__system=a.system, rank__isnull=False).select_related("edition").first()
    if ranked is not None:
        assert f"Rank in edition <a href=\"/editions/{ranked.edition.name}/\">" in page
    assert "Software (best run)" in page


def test_at_most_four_and_nonsense_ignored(client, demo_data):
    demo_data(30)
    ids = list(Result.objects.entries().values_list("system_id", flat=True)[:6])
    page = client.get("/compare", {"systems": ",".join(map(str, ids)) + ",x,-3"}).content.decode()
    assert f"{min(4, len(ids))} systems compared" in page
    assert "Name two to four systems" in client.get("/compare?systems=abc").content.decode()
