"""CSV export of any list endpoint (`?format=csv`): one row per object, nested fields dotted."""

from __future__ import annotations

import csv
import functools
import io
import json
from typing import Any

from rest_framework.renderers import BaseRenderer


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """One CSV row of an answer's object: nested objects' fields dotted (`site.name`), a list of plain values as
    its JSON, a list of objects left out."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        _into(out, obj, prefix)
    elif not isinstance(obj, list):
        out[prefix[:-1]] = obj
    return out


def _into(out: dict[str, Any], obj: dict[str, Any], prefix: str) -> None:
    for key, value in obj.items():
        if isinstance(value, dict):
            _into(out, value, _dotted(prefix, key) + ".")
        elif isinstance(value, list):
            if value and not isinstance(value[0], dict):
                out[_dotted(prefix, key)] = json.dumps(value, separators=(",", ":"))
        else:
            out[_dotted(prefix, key) if prefix else key] = value


@functools.lru_cache(maxsize=4096)
def _dotted(prefix: str, key: str) -> str:
    """`prefix` + `key`, made once per column rather than once per row."""
    return prefix + key


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
        columns: dict[str, None] = {}  # the columns in the order met (a dict: 10,000 rows x 30 keys)
        for row in rows:
            for key in row:
                if key not in columns:
                    columns[key] = None
        buf = io.StringIO()
        names = tuple(columns)
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(names)
        # What csv.DictWriter writes (a missing column empty), without its per-row lookups where a row has
        # every column in order, as the rows of one list do.
        writer.writerows(row.values() if tuple(row) == names else [row.get(c, "") for c in names] for row in rows)
        response = (renderer_context or {}).get("response")
        view = (renderer_context or {}).get("view")
        if response is not None and response.status_code < 400:
            name = getattr(view, "basename", None) or "export"
            response["Content-Disposition"] = f'attachment; filename="aiperf-{name}.csv"'
        return buf.getvalue().encode(self.charset)
