"""The edition calendar: when submissions for an edition open and close (it is frozen then, by beat's
freeze_due_editions) and when it is published; until then (the embargo) its entries are nowhere public."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from leaderboard import tasks
from leaderboard.models import Edition, Result

pytestmark = pytest.mark.django_db


def test_the_calendar_the_freeze_at_close_and_the_embargo(client, demo_data):
    demo_data(20)
    now = timezone.now()
    edition = Edition.objects.create(name="2027-06", title="June 2027", submissions_open=now - timedelta(days=30),
                                     submissions_close=now + timedelta(days=1), publish_at=now + timedelta(days=10))
    page = client.get("/editions/").content.decode()
    assert "Calendar" in page and "June 2027" in page and "open for submissions" in page
    assert client.get("/api/v1/editions/").json()["results"][0]["state"] == "open"
    assert tasks.freeze_due_editions() == []  # not closed yet

    Edition.objects.filter(pk=edition.pk).update(submissions_close=now - timedelta(minutes=1))
    assert tasks.freeze_due_editions() == ["2027-06"]
    edition.refresh_from_db()
    assert edition.frozen and edition.state() == "embargoed" and edition.entries.exists()
    # Under embargo: on the calendar, its entries and its page nowhere public.
    from leaderboard import listcache

    listcache.new_generation()
    assert "frozen, under embargo" in client.get("/editions/").content.decode()
    assert client.get("/editions/2027-06/").status_code == 404
    assert client.get("/api/v1/leaderboard/", {"edition": "2027-06"}).status_code == 404
    api = next(e for e in client.get("/api/v1/editions/").json()["results"] if e["name"] == "2027-06")
    assert api["state"] == "embargoed" and api["entries"] is None
    cited = edition.entries.first().result_id
    assert "2027-06" not in client.get(f"/results/{cited}").content.decode()

    Edition.objects.filter(pk=edition.pk).update(publish_at=now - timedelta(seconds=1))  # the embargo ends
    listcache.new_generation()
    assert client.get("/editions/2027-06/").status_code == 200
    assert next(e for e in client.get("/api/v1/editions/").json()["results"]
                if e["name"] == "2027-06")["entries"] == Result.objects.filter(edition_entries__edition=edition).count()
    assert tasks.freeze_due_editions() == []  # frozen once
