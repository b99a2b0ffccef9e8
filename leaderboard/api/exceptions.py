"""Every error answer of the API names its check: DRF's own errors (404, 401, 403, 405, 429...) get a
`check` beside their `detail`, as the service's refusals have (`{"detail", "check"}`, docs/service.md).

A refused form keeps its field errors and gets a `detail` that sums them up and the check `request`.
Found by the schemathesis run (tests/service/test_e2e_fuzz_api.py): a 404 of an unknown `?format=`
and a 400 of a bad form came without the `check` the documented error schema requires.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler

CHECK_OF_STATUS = {400: "request", 401: "not_authenticated", 403: "permission_denied", 404: "not_found",
                   405: "method_not_allowed", 406: "not_acceptable", 415: "unsupported_media_type", 429: "throttled"}


def _text(errors: Any) -> str:
    if isinstance(errors, list):
        return " ".join(_text(e) for e in errors)
    if isinstance(errors, dict):
        return "; ".join(f"{k}: {_text(v)}" for k, v in errors.items())
    return str(errors)


def handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(exc, context)
    if response is None or not isinstance(response.data, dict):
        return response
    if isinstance(exc, ValidationError) and "detail" not in response.data:
        # Field errors keep their shape; the summary and the check are added beside them.
        response.data["detail"] = "; ".join(f"{field}: {_text(errors)}" for field, errors in response.data.items())
        response.data["check"] = "request"
    if "detail" in response.data and "check" not in response.data:
        code = getattr(response.data["detail"], "code", None)
        response.data["check"] = code if isinstance(code, str) and code else CHECK_OF_STATUS.get(
            response.status_code, "error")
    return response
