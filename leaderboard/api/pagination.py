"""Page-number pagination; an explicit `?format=csv` or `?format=json` exports the whole filtered list."""

from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 1000

    def paginate_queryset(self, queryset, request, view=None):
        if request.query_params.get("format") in ("csv", "json"):
            return None  # an export: every row of the filtered list
        return super().paginate_queryset(queryset, request, view)
