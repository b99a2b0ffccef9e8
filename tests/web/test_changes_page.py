"""`/changes` and a result's history: the list's transparency log as a reader sees it on the site."""

from __future__ import annotations

import pytest

from leaderboard import pipeline
from leaderboard.models import LogEntry, Result

pytestmark = pytest.mark.django_db


def test_the_changes_page_lists_the_log_newest_first(client, demo_data):
    demo_data(6)
    r = Result.objects.live().first()
    pipeline.withdraw(r.submission, by="mia", reason="hardware not as registered")
    html = client.get("/changes").content.decode()
    assert "aiperf-runner check-list --server http://testserver" in html
    newest = LogEntry.objects.order_by("-index").first()
    assert html.index(f'<th scope="row" class="num">{newest.index}</th>') < html.index('<th scope="row" class="num">0</th>')
    assert "withdrawn" in html and "hardware not as registered" in html and "mia" in html
    assert f"result {r.pk} (" in html and "off the list" in html
    assert 'aria-current="page">Changes<' in html


def test_a_result_page_shows_its_history_and_proof_link(client, demo_data):
    demo_data(4)
    r = Result.objects.live().first()
    html = client.get(f"/results/{r.pk}").content.decode()
    assert "History on the list's log" in html and f'href="/api/v1/results/{r.pk}/proof/"' in html
    assert ">accepted<" in html


def test_older_entries_are_a_page_away(client, demo_data):
    demo_data(120)
    html = client.get("/changes").content.decode()
    assert html.count('<th scope="row" class="num">') == 100 and "?before=" in html
    older = client.get("/changes?before=20").content.decode()
    assert older.count('<th scope="row" class="num">') == 20
