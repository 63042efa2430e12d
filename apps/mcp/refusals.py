"""The MCP mount's answer to a request refused before dispatch (apps.core.request_limits).

A JSON-RPC error object, never the OpenWOP envelope: a size refusal is invalid-request (HTTP 413),
a depth refusal a parse error (400), a rate or stream refusal JSON-RPC's implementation-defined
server error -32000 with `data.reason` `rate_limited` (the registered OpenWOP code, as the mount
already does for `unauthenticated`), HTTP 429 and Retry-After. A saturated host (no database
connection in time) is -32603 with `data.reason` `overloaded`, HTTP 503 and Retry-After.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR

from apps.core.request_limits import Refusal
from apps.mcp.errors import McpError
from apps.mcp.views import _error

RATE_LIMITED_CODE = -32000

_ROWS: dict[str, tuple[int, int]] = {
    "payload_too_large": (INVALID_REQUEST, 413),
    "json_too_deep": (PARSE_ERROR, 400),
    "rate_limited": (RATE_LIMITED_CODE, 429),
    "streams_exhausted": (RATE_LIMITED_CODE, 429),
    "overloaded": (INTERNAL_ERROR, 503),
    "body_timeout": (INVALID_REQUEST, 408),  # the body came too slowly (apps/core/read_deadline.py)
}


def mcp_refusal(request: HttpRequest, refusal: Refusal) -> HttpResponseBase:
    code, http_status = _ROWS[refusal.kind]
    reason = "rate_limited" if code == RATE_LIMITED_CODE else refusal.kind
    data: dict[str, object] = {"reason": reason}
    if refusal.kind != "overloaded":
        data["limit"] = refusal.limit
    if refusal.budget is not None:  # a tenant or host budget (apps.core.request_limits)
        data["budget"] = refusal.budget
    error = McpError(code, refusal.message, data, http_status=http_status)
    if refusal.retry_after is not None:
        error.headers["Retry-After"] = str(refusal.retry_after)
    return _error(refusal.request_id, error)
