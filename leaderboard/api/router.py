"""The /api/v1/ endpoints, and the API root that links every one of them."""

from __future__ import annotations

from typing import Any

from django.urls import NoReverseMatch, reverse
from rest_framework import routers
from rest_framework.request import Request
from rest_framework.response import Response

from leaderboard.api import views

# What a reader can GET, then the endpoints that only take writes (each with the method it takes).
READS = {"leaderboard": "leaderboard-list", "results": "result-list", "systems": "system-list",
         "sites": "site-list", "editions": "edition-list", "submissions": "submission-list", "keys": "key-list",
         "witness": "witness", "log_head": "log-head", "log_entries": "log-entries", "log_key": "log-key",
         "log_consistency": "log-consistency", "schema": "schema", "docs": "api-docs"}
WRITES = {"submissions": ("submission-list", "POST"), "uploads": ("uploads", "POST (tus 1.0.0)"),
          "runs": ("run-list", "POST"), "systems": ("system-list", "POST"), "keys": ("key-list", "POST")}


class ApiRoot(routers.APIRootView):
    """The API's endpoints: what anyone may read, and what a site writes with its token."""

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        def url(name: str) -> str | None:
            try:
                return request.build_absolute_uri(reverse(name))
            except NoReverseMatch:  # a URLconf without the name (a test's)
                return None

        reads = {key: url(name) for key, name in READS.items()}
        writes = {key: {"url": url(name), "method": method} for key, (name, method) in WRITES.items()}
        return Response({**{k: v for k, v in reads.items() if v},
                         "writes": {k: v for k, v in writes.items() if v["url"]}})


class Router(routers.DefaultRouter):
    APIRootView = ApiRoot


router = Router()
router.register("leaderboard", views.LeaderboardViewSet, basename="leaderboard")
router.register("results", views.ResultViewSet, basename="result")
router.register("systems", views.SystemViewSet, basename="system")
router.register("sites", views.SiteViewSet, basename="site")
router.register("editions", views.EditionViewSet, basename="edition")
router.register("submissions", views.SubmissionViewSet, basename="submission")
router.register("keys", views.SiteKeyViewSet, basename="key")
router.register("runs", views.RunViewSet, basename="run")
