"""server/exportgc.py: a whole-list export of the API runs with the cyclic garbage collector paused, nothing else."""

from __future__ import annotations

import gc
import threading

import pytest

from leaderboard.api.renderers import CSVRenderer
from server import exportgc

pytestmark = pytest.mark.django_db


@pytest.fixture
def collector_seen(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """gc.isenabled() as each CSV rendering saw it."""
    seen: list[bool] = []
    render = CSVRenderer.render

    def watched(self, *args, **kwargs):
        seen.append(gc.isenabled())
        return render(self, *args, **kwargs)

    monkeypatch.setattr(CSVRenderer, "render", watched)
    return seen


def test_an_export_renders_with_the_collector_paused_and_gives_it_back(client, collector_seen) -> None:
    assert gc.isenabled()
    assert client.get("/api/v1/results/?format=csv").status_code == 200
    assert collector_seen == [False] and gc.isenabled()
    assert client.get("/api/v1/results/?format=json").status_code == 200 and gc.isenabled()


def test_pages_and_a_collector_already_off_are_left_alone(client, collector_seen) -> None:
    assert client.get("/api/v1/results/", HTTP_ACCEPT="text/csv").status_code == 200  # a page: negotiated, no export
    assert collector_seen == [True]
    gc.disable()
    try:
        with exportgc.gc_paused():
            pass
        assert not gc.isenabled()  # not switched on by the pause's end: someone else had it off
    finally:
        gc.enable()


def test_overlapping_exports_give_the_collector_back_when_the_last_ends() -> None:
    first_in, second_done, states = threading.Event(), threading.Event(), []

    def first() -> None:
        with exportgc.gc_paused():
            first_in.set()
            second_done.wait(10)
            states.append(("first, after the second ended", gc.isenabled()))

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with exportgc.gc_paused():
        states.append(("second", gc.isenabled()))
    second_done.set()
    thread.join(10)
    assert states == [("second", False), ("first, after the second ended", False)] and gc.isenabled()
