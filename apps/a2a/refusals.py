"""The A2A door's answer to a request refused before dispatch (apps.core.request_limits).

Never the OpenWOP envelope on an interface URL (interop.md §A2A error details): the JSON-RPC url
answers a JSON-RPC error whose `data` holds exactly one ErrorInfo, every other /a2a path a
google.rpc.Status. A size or depth refusal is the binding's invalid-request / parse error; a rate
or stream refusal has no A2A row, so it is JSON-RPC's implementation-defined server error
(-32000) with reason RATE_LIMIT_EXCEEDED, gRPC's RESOURCE_EXHAUSTED and HTTP 429 + Retry-After.
A saturated host (no database connection in time) is the internal-error row (-32603,
INTERNAL_ERROR) with gRPC's UNAVAILABLE, HTTP 503 and Retry-After: retriable, and not a 500.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse

from apps.a2a.errors import A2A_DOMAIN, ERROR_INFO_TYPE
from apps.core.request_limits import Refusal

# kind -> (JSON-RPC code, HTTP status, gRPC status, ErrorInfo reason)
REFUSAL_ROWS: dict[str, tuple[int, int, str, str]] = {
    "payload_too_large": (-32600, 413, "INVALID_ARGUMENT", "INVALID_REQUEST"),
    "json_too_deep": (-32700, 400, "INVALID_ARGUMENT", "PARSE_ERROR"),
    "rate_limited": (-32000, 429, "RESOURCE_EXHAUSTED", "RATE_LIMIT_EXCEEDED"),
    "streams_exhausted": (-32000, 429, "RESOURCE_EXHAUSTED", "RATE_LIMIT_EXCEEDED"),
    "overloaded": (-32603, 503, "UNAVAILABLE", "INTERNAL_ERROR"),
    "body_timeout": (-32600, 408, "DEADLINE_EXCEEDED", "INVALID_REQUEST"),  # the body came too slowly
}


def refusal_info(refusal: Refusal, **metadata: str) -> dict[str, Any]:
    """The refusal's one ErrorInfo: its row's reason, and the limit it hit (none when overloaded)."""
    limit = {} if refusal.kind == "overloaded" else {"limit": str(refusal.limit)}
    if refusal.budget is not None:  # a tenant or host budget (apps.core.request_limits)
        limit["budget"] = refusal.budget
    reason = REFUSAL_ROWS[refusal.kind][3]
    return {"@type": ERROR_INFO_TYPE, "reason": reason, "domain": A2A_DOMAIN, "metadata": {**limit, **metadata}}


def a2a_refusal(request: HttpRequest, refusal: Refusal) -> HttpResponseBase:
    code, http_status, grpc_status, _ = REFUSAL_ROWS[refusal.kind]
    details = [refusal_info(refusal)]
    if request.path.rstrip("/") == "/a2a/jsonrpc":
        body: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": refusal.request_id,
            "error": {"code": code, "message": refusal.message, "data": details},
        }
    else:
        body = {"error": {"code": http_status, "status": grpc_status, "message": refusal.message, "details": details}}
    response = JsonResponse(body, status=http_status)
    if refusal.retry_after is not None:
        response["Retry-After"] = str(refusal.retry_after)
    return response
