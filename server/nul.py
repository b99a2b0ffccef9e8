"""Refuse a request whose query string carries a NUL character, before any view reads it.

PostgreSQL text cannot hold NUL, so a parameter read straight from `request.GET` (an edition's name,
the FLOP rules) and put in a query would end in a DataError (500). Form fields already refuse NUL;
this covers every parameter at once. Found by the stateful schemathesis run.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse


class RejectNulMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        for key, values in request.GET.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                name = key.replace("\x00", "")
                return JsonResponse({"detail": f"query parameter {name!r} holds a NUL character", "check": "request"},
                                    status=400)
        return self.get_response(request)
