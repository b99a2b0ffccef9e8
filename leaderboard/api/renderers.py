"""CSV export of any list endpoint (`?format=csv`): one row per object, nested fields dotted."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from rest_framework.renderers import BaseRenderer


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    if isinstance(obj, list):
        return {prefix[:-1]: json.dumps(obj, separators=(",", ":"))} if obj and not isinstance(obj[0], dict) else {}
    return {prefix[:-1]: obj}


class CSVRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if data is None:
            return b""
        if isinstance(data, dict) and isinstance(data.get("results"), list):
            data = data["results"]  # a paginated response (the format was negotiated, not asked for)
        rows = [_flatten(item) for item in (data if isinstance(data, list) else [data])]
        columns: list[str] = []
        for row in rows:
            columns.extend(k for k in row if k not in columns)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        response = (renderer_context or {}).get("response")
        view = (renderer_context or {}).get("view")
        if response is not None and response.status_code < 400:
            name = getattr(view, "basename", None) or "export"
            response["Content-Disposition"] = f'attachment; filename="aiperf-{name}.csv"'
        return buf.getvalue().encode(self.charset)
