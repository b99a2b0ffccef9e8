"""Cached renderings of the public reads (the list, result pages, the API list), dropped on every change.

Every cached response is keyed by the *list generation*, a token in the cache (Redis in production,
shared by every web process) that `bump()` replaces when the list or what the pages show changes:
`ranking.rerank()` (publish, withdraw, review, re-rank), an edition frozen, a site, system or result
saved. The token is replaced at once and again after the transaction commits, so a page another process
rendered from the old rows in between is not kept; a page cached under an old token is never read again
and expires.
`AIPERF_PAGE_CACHE_S` bounds how long any page lives (0 turns the cache off); changes made behind the
service's back (raw SQL) show after that, or at once with `manage.py aiperf_rerank`.

Only anonymous reads are cached (no session cookie, no Authorization header): every public page is the
same for every anonymous reader, and a signed-in maintainer always sees the page as it is.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import secrets
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase

log = logging.getLogger(__name__)
T = TypeVar("T")

GENERATION_KEY = "aiperf:list:generation"
# Rows beyond this are an export of the whole list: too big to be worth a cache entry.
MAX_CACHED_BYTES = 2_000_000


def _timeout() -> int:
    return int(getattr(settings, "AIPERF_PAGE_CACHE_S", 300))


def generation() -> str:
    """The current list generation (made on first use)."""
    token = cache.get(GENERATION_KEY)
    if token is None:
        token = secrets.token_hex(8)
        # add(): of two processes that find no token, both use the one that was stored first
        if not cache.add(GENERATION_KEY, token, timeout=None):
            token = cache.get(GENERATION_KEY) or token
    return str(token)


def new_generation() -> None:
    """Drop every cached page now (bump() does this at once and again at the commit)."""
    cache.set(GENERATION_KEY, secrets.token_hex(8), timeout=None)


def bump() -> None:
    """Drop every cached page now and again once the current transaction commits.

    Now: this process (and a test's transaction, which never commits) reads the change at once. At the
    commit: a page another process rendered from the old rows in between is dropped too.
    """
    new_generation()
    transaction.on_commit(new_generation)


def cached_value(name: str, compute: Callable[[], T]) -> T:
    """`compute()` once per list generation (a figure of the whole list: the filter menus' values)."""
    if _timeout() <= 0:
        return compute()
    try:
        key = f"aiperf:value:{generation()}:{hashlib.sha256(name.encode()).hexdigest()}"
        value = cache.get(key)
    except Exception:  # noqa: BLE001 - a cache outage must not take the pages down
        log.warning("cache unavailable; computing %s", name, exc_info=True)
        return compute()
    if value is None:
        value = compute()
        cache.set(key, value, timeout=_timeout())
    return value


def _anonymous(request: HttpRequest) -> bool:
    return settings.SESSION_COOKIE_NAME not in request.COOKIES and "HTTP_AUTHORIZATION" not in request.META


def _key(request: HttpRequest, namespace: str) -> str:
    # The Accept header picks the API's renderer (JSON, the browsable API, CSV): part of the key.
    raw = f"{request.get_full_path()}\n{request.META.get('HTTP_ACCEPT', '')}"
    return f"aiperf:page:{namespace}:{generation()}:{hashlib.sha256(raw.encode()).hexdigest()}"


View = Callable[..., HttpResponseBase]


def cached_page(namespace: str) -> Callable[[View], View]:
    """Serve a view's anonymous GETs from the cache, by URL and generation; only 200 answers are stored."""

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if request.method != "GET" or _timeout() <= 0 or not _anonymous(request):
                return view(request, *args, **kwargs)
            try:
                key = _key(request, namespace)
                hit = cache.get(key)
            except Exception:  # noqa: BLE001 - a cache outage must not take the pages down
                log.warning("page cache unavailable; serving uncached", exc_info=True)
                return view(request, *args, **kwargs)
            if hit is not None:
                return hit
            response = view(request, *args, **kwargs)
            render = getattr(response, "render", None)  # DRF/template responses render lazily
            if callable(render) and not getattr(response, "is_rendered", True):
                render()
            # Not a page that holds a CSRF token (the browsable API's forms): it is the reader's own.
            if (isinstance(response, HttpResponse) and response.status_code == 200 and not response.cookies
                    and not request.META.get("CSRF_COOKIE_USED")
                    and len(response.content) <= MAX_CACHED_BYTES):
                try:
                    cache.set(key, response, timeout=_timeout())
                except Exception:  # noqa: BLE001
                    log.warning("page cache unavailable; not stored", exc_info=True)
            return response

        return wrapper

    return decorate


def connect_signals() -> None:
    """What the pages show besides the ranks: sites, systems, results, editions (admin edits, the pipeline)."""
    from django.db.models.signals import post_delete, post_save

    from leaderboard.models import Edition, Result, Site, System

    def changed(sender: Any, **kwargs: Any) -> None:
        bump()

    for model in (Site, System, Result, Edition):
        post_save.connect(changed, sender=model, dispatch_uid=f"listcache-save-{model.__name__}")
        post_delete.connect(changed, sender=model, dispatch_uid=f"listcache-delete-{model.__name__}")
