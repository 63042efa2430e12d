"""The streamable HTTP mount, stateless 2026-07-28 (POST only, one JSON response per request).

Order of refusals: method (405) -> Origin (403, DNS rebinding) -> JSON (-32700/-32600) -> bearer
credential (401) -> the ladder and negotiation (dispatch.exchange_open) -> the method. Every refusal
is a JSON-RPC error object; the OpenWOP envelope never answers here (core.protocol excludes /mcp).

Cancellation: Django's ASGI handler cancels this view when the server reports `http.disconnect`,
which surfaces as CancelledError inside `tools/call`'s wait (tools.py cancels the run there).
Once the view has returned its response nothing it started can be cancelled by the connection.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.request import validate_host
from django.views.decorators.csrf import csrf_exempt
from mcp_types.jsonrpc import INVALID_REQUEST, PARSE_ERROR

from apps.core.errors import OpenWopError, Unauthenticated
from apps.core.json_limits import json_loads_limited
from apps.mcp.dispatch import dispatch, exchange_open
from apps.mcp.errors import McpError, mcp_error_from
from apps.tenants.selectors import subject_from_authorization


def _json(payload: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(json.dumps(payload, separators=(",", ":")), status=status, content_type="application/json")
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _error(request_id: Any, error: McpError) -> HttpResponse:
    return _json({"jsonrpc": "2.0", "id": request_id, "error": error.error_object()}, error.http_status, error.headers)


def origin_allowed(origin: str | None) -> bool:
    """No Origin (a non-browser client) is fine; a browser origin must name a host we serve."""
    if origin is None:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    public = urlsplit(settings.OPENWOP_PUBLIC_URL)
    if (parts.scheme, parts.netloc) == (public.scheme, public.netloc):
        return True
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return validate_host(host, settings.ALLOWED_HOSTS)


def _unauthenticated(exc: Unauthenticated) -> McpError:
    error = McpError(INVALID_REQUEST, exc.message, {"reason": exc.code}, http_status=401)
    error.headers.update(exc.headers)
    return error


@csrf_exempt
async def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        # 2026-07-28 has no GET stream and no session to DELETE.
        return HttpResponse(status=405, headers={"Allow": "POST"})
    if not origin_allowed(request.headers.get("Origin")):
        return _error(None, McpError(INVALID_REQUEST, "Origin not allowed", http_status=403))
    try:
        body = json_loads_limited(request.body)
    except (ValueError, UnicodeDecodeError):
        return _error(None, McpError(PARSE_ERROR, "Parse error"))
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0" or not isinstance(body.get("method"), str):
        request_id = body.get("id") if isinstance(body, dict) else None
        return _error(request_id, McpError(INVALID_REQUEST, "Invalid Request"))
    request_id = body.get("id")
    try:
        subject = await sync_to_async(subject_from_authorization)(request.headers.get("Authorization"))
    except Unauthenticated as exc:
        return _error(request_id, _unauthenticated(exc))
    if "id" not in body:
        # A notification. On HTTP none asks anything of us: closing the stream is the cancel.
        return HttpResponse(status=202)
    headers = {name.lower(): value for name, value in request.headers.items()}
    try:
        exchange = await exchange_open(
            body=body, subject=subject, headers=headers, origin=request.headers.get("Origin")
        )
        result = await dispatch(exchange, body["method"], body.get("params"))
    except McpError as exc:
        return _error(request_id, exc)
    except OpenWopError as exc:
        return _error(request_id, mcp_error_from(exc))
    return _json({"jsonrpc": "2.0", "id": request_id, "result": result})
