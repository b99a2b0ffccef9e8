"""Page-number pagination; an explicit `?format=csv` or `?format=json` exports the whole filtered list."""

from rest_framework.pagination import PageNumberPagination


def is_export(request) -> bool:
    """Whether `request` asks for the whole filtered list rather than a page."""
    return request.query_params.get("format") in ("csv", "json")


class Pagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 1000

    def paginate_queryset(self, queryset, request, view=None):
        if is_export(request):
            return None  # an export: every row of the filtered list
        return super().paginate_queryset(queryset, request, view)

    def get_paginated_response_schema(self, schema):
        # A list answers a page, or with ?format=json the whole filtered list as a bare array (`schema`,
        # the array of the page's results). Found by schemathesis (tests/service/test_e2e_fuzz_api.py).
        page = super().get_paginated_response_schema(schema)
        return {"oneOf": [page, {**schema, "description": "?format=json: every row of the filtered list"}]}
