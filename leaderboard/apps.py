"""The leaderboard app: after every `migrate`, the stored ranks are made again (leaderboard/ranking.py);
a service's own rules versions are loaded (AIPERF_RULES_FILE)."""

from __future__ import annotations

import json
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models.signals import post_migrate


def _rerank(sender: Any, **kwargs: Any) -> None:
    from leaderboard import ranking  # the app registry is ready only now

    ranking.rerank()


class LeaderboardConfig(AppConfig):
    name = "leaderboard"
    verbose_name = "AIPerf leaderboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from aiperf_runner.spec import rules

        from leaderboard import checks, listcache  # noqa: F401 - checks: registers the deployment checks
        post_migrate.connect(_rerank, sender=self)
        listcache.connect_signals()
        if settings.AIPERF_RULES_FILE:
            try:
                with open(settings.AIPERF_RULES_FILE) as fh:
                    rules.add_versions(json.load(fh))
            except (OSError, ValueError) as exc:
                raise ImproperlyConfigured(f"AIPERF_RULES_FILE {settings.AIPERF_RULES_FILE}: {exc}") from None
        if settings.AIPERF_RULES_VERSION and settings.AIPERF_RULES_VERSION not in rules.THRESHOLDS:
            raise ImproperlyConfigured(f"AIPERF_RULES_VERSION {settings.AIPERF_RULES_VERSION!r} is not a rules "
                                       f"version (known: {', '.join(rules.THRESHOLDS)})")
        unknown = [v for v in settings.AIPERF_OFFICIAL_RULES if v not in rules.THRESHOLDS]
        if unknown:
            raise ImproperlyConfigured(f"AIPERF_OFFICIAL_RULES: unknown rules version {', '.join(unknown)} "
                                       f"(known: {', '.join(rules.THRESHOLDS)})")
