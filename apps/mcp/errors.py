"""JSON-RPC errors of the MCP mount, and the one mapper from the host's error hierarchy.

The OpenWOP envelope never appears here (interop.md §The operation mappings): every refusal on
the mount, a missing credential included, is a JSON-RPC error object. HTTP statuses follow the
2026-07-28 streamable HTTP binding (and mcp 2.3.0's table): shape and negotiation errors 400,
an unknown method 404, everything a handler decides 200 unless listed.
"""

from __future__ import annotations

from typing import Any

from django.db import DataError
from mcp_types.jsonrpc import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)

from apps.core.api_errors import data_error_refusal
from apps.core.caller_input import caller_json_check
from apps.core.errors import NotFound, OpenWopError, RateLimited, ValidationFailed

# JSON-RPC's implementation-defined server error of a budget refusal (as refusals.py's rate rows).
RATE_LIMITED_CODE = -32000

HTTP_STATUS_BY_CODE: dict[int, int] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}

# interop.md §Isolation: one message for every task the caller cannot read, whatever the reason
# (unknown, purged, another tenant's, malformed id), so the bytes differ only in the JSON-RPC id.
UNKNOWN_TASK_MESSAGE = "Unknown task"
INVALID_REQUEST_STATE_MESSAGE = "Invalid or expired requestState"


class McpError(Exception):
    """A JSON-RPC error the mount answers with. `http_status` overrides the code's default."""

    def __init__(self, code: int, message: str, data: Any = None, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status if http_status is not None else HTTP_STATUS_BY_CODE.get(code, 200)
        self.headers: dict[str, str] = {}

    def error_object(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def unknown_task() -> McpError:
    return McpError(INVALID_PARAMS, UNKNOWN_TASK_MESSAGE)


def invalid_request_state() -> McpError:
    return McpError(INVALID_PARAMS, INVALID_REQUEST_STATE_MESSAGE)


def invalid_params(message: str, data: Any = None) -> McpError:
    return McpError(INVALID_PARAMS, message, data)


def method_not_found(method: str) -> McpError:
    return McpError(METHOD_NOT_FOUND, "Method not found", method)


def missing_capability(required: dict[str, Any]) -> McpError:
    return McpError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Missing required client capability",
        {"requiredCapabilities": required},
    )


def mrtr_rounds_exceeded(max_rounds: int) -> McpError:
    """interop.md §The MCP round ceiling, as a JSON-RPC error carrying the registered reason."""
    return McpError(
        INVALID_PARAMS,
        "Too many input_required rounds",
        {"reason": "mcp_mrtr_rounds_exceeded", "maxRounds": max_rounds},
    )


def mcp_error_from(exc: OpenWopError) -> McpError:
    """The one mapping of the host's errors onto JSON-RPC (STYLE.md habit 7)."""
    if isinstance(exc, RateLimited):
        # A tenant budget spent while dispatching: the row of a rate refusal before dispatch
        # (apps/mcp/refusals.py): -32000, data.reason rate_limited with the budget, HTTP 429, Retry-After.
        error = McpError(RATE_LIMITED_CODE, exc.message, {"reason": exc.code, **(exc.details or {})}, http_status=429)
        error.headers.update(exc.headers)
        return error
    if isinstance(exc, ValidationFailed):
        return invalid_params(exc.message, exc.details)
    if isinstance(exc, NotFound):
        return invalid_params(exc.message)
    return McpError(INTERNAL_ERROR, "Internal error")


def mcp_error_from_data_error(exc: DataError) -> McpError:
    """A value the database refused that no parse step caught: the caller's -32602, not -32603."""
    return mcp_error_from(data_error_refusal(exc))


def params_check(params: Any) -> None:
    """The parse step: no NUL anywhere in the params (tool arguments,
    prompt names, answers: PostgreSQL's text and jsonb refuse it) and no number a double cannot
    hold, refused as -32602 before anything is read, opened or stored."""
    try:
        caller_json_check(params, field="params")
    except ValidationFailed as exc:
        raise mcp_error_from(exc) from None


def request_id_valid(value: Any) -> bool:
    """JSON-RPC 2.0 ids are strings or integers (a bool is no integer; fractions SHOULD NOT be
    sent), and MCP forbids null: anything else is -32600, answered with id null."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
