"""URL configuration: the web pages, the REST API under /api/v1/, its schema and docs, health checks.

The API's docs are Swagger UI only: Redoc loads its logo from another origin and needs blob workers,
which the Content-Security-Policy (server/settings.py) does not allow.
"""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerSplitView

from leaderboard import health
from leaderboard.api import translog as log_views
from leaderboard.api.router import router
from leaderboard.api.schemaview import CachedSchemaView
from leaderboard.api.uploads import UploadsView, UploadView
from leaderboard.api.views import WitnessView


def favicon(request: HttpRequest) -> HttpResponse:
    # Resolved at request time: the hashed static name exists only after collectstatic.
    return HttpResponsePermanentRedirect(static("site/favicon.svg"))


urlpatterns = [
    path("", include("leaderboard.site.urls")),  # the public pages (docs/site.md)
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/v1/witness/", WitnessView.as_view(), name="witness"),
    # The list's transparency log: leaderboard/api/translog.py.
    path("api/v1/log/key/", log_views.LogKeyView.as_view(), name="log-key"),
    path("api/v1/log/head/", log_views.LogHeadView.as_view(), name="log-head"),
    path("api/v1/log/entries/", log_views.LogEntriesView.as_view(), name="log-entries"),
    path("api/v1/log/consistency/", log_views.LogConsistencyView.as_view(), name="log-consistency"),
    path("api/v1/results/<int:result_id>/proof/", log_views.ResultProofView.as_view(), name="result-proof"),
    # Chunked, resumable uploads (tus 1.0.0): leaderboard/api/uploads.py.
    path("api/v1/uploads/", UploadsView.as_view(), name="uploads"),
    path("api/v1/uploads/<uuid:pk>/", UploadView.as_view(), name="upload"),
    path("api/v1/", include(router.urls)),
    path("api/schema/", CachedSchemaView.as_view(), name="schema"),
    # The split view serves Swagger UI's setup as a script of its own: no inline script (CSP).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    # Browsers ask for /favicon.ico on pages that name none (the API's, the admin's).
    path("favicon.ico", favicon),
]
