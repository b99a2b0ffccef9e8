"""URL configuration: the web pages, the REST API under /api/v1/, its schema and docs, health checks."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from leaderboard import health
from leaderboard.api.router import router
from leaderboard.api.views import WitnessView

urlpatterns = [
    path("", include("leaderboard.site.urls")),  # the public pages (docs/site.md)
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/v1/witness/", WitnessView.as_view(), name="witness"),
    path("api/v1/", include(router.urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
]
