"""Whole-list exports (`?format=csv` or `?format=json`) run with the cyclic garbage collector paused.

An export of 10,000 results or submissions makes a few hundred thousand short-lived dicts and strings; each 700
of them start a collection, and the older generations' passes walk every object the process holds (Django's,
the imports'). Measured at 10,000 results (bench/api_lists.py's database): the collector took 20-35 % of the
CSV exports' time. Reference counting still frees what a request drops; a cycle it made waits for the next
collection after the export. Requests of other threads in the process are not slowed: the pause only skips work.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.http import HttpRequest, HttpResponse

EXPORT_FORMATS = ("csv", "json")  # leaderboard/api/pagination.py is_export: the whole filtered list
_lock = threading.Lock()
_exports = 0  # exports under way in this process
_paused_by_us = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """The collector off while any export of the process runs; back on (if it was on) when the last ends."""
    global _exports, _paused_by_us
    with _lock:
        _exports += 1
        if _exports == 1 and gc.isenabled():
            gc.disable()
            _paused_by_us = True
    try:
        yield
    finally:
        with _lock:
            _exports -= 1
            if _exports == 0 and _paused_by_us:
                gc.enable()
                _paused_by_us = False


class ExportGcPauseMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method != "GET" or request.GET.get("format") not in EXPORT_FORMATS:
            return self.get_response(request)
        with gc_paused():  # the view and the rendering of its response (Django renders inside the chain)
            response = self.get_response(request)
            if getattr(response, "is_rendered", False) and getattr(response, "data", None) is not None:
                # Rendered: its rows are bytes now. DRF's response is in reference cycles (its renderer context
                # names it, its view holds it), so the rows would wait for a collection: 60,000 objects an
                # export, a collection of ten exports' 560 ms (measured as above).
                response.data = None  # type: ignore[attr-defined]  # a DRF Response
            return response
