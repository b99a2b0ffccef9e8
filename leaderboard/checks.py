"""Deployment checks of this service (`manage.py check --deploy`), beside Django's own."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Tags, Warning, register


@register(Tags.security, deploy=True)
def shared_cache(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """The write throttles and the uploads in progress count in the cache: every web process must share it."""
    backend = settings.CACHES["default"]["BACKEND"]
    if backend.endswith("RedisCache"):
        return []
    return [Warning(f"the cache is {backend}, one per process: the write throttles and the upload limits "
                    "would count each process apart", hint="set CACHE_URL=redis://HOST:6379/1 (docs/service.md)",
                    id="aiperf.W001")]
