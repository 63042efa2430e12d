"""The one mapper from A2A errors to both bindings' error bodies (STYLE.md habit 7).

interop.md §A2A error details: on JSON-RPC `error.data` is an array holding exactly one
`google.rpc.ErrorInfo` (reason UPPER_SNAKE, domain `a2a-protocol.org`), for every error including
parse errors, unknown methods and a missing credential; on HTTP+JSON the body is AIP-193
`google.rpc.Status`. The OpenWOP envelope never appears here. ErrorInfo metadata stays
string -> string (a2a-sdk puts lists there; the proto type does not allow it).

The error classes are a2a-sdk's own (`a2a.utils.errors`), so an SDK client maps our reasons back
to the same classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    ExtensionSupportRequiredError,
    InternalError,
    InvalidAgentResponseError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)

ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
A2A_DOMAIN = "a2a-protocol.org"


class AuthenticationRequired(A2AError):
    """No usable bearer credential. One fixed message for every bad credential (missing, malformed,
    unknown, revoked), so the answer discloses nothing about which it was."""

    message = "A valid bearer credential is required."


@dataclass(frozen=True, slots=True)
class ErrorRow:
    jsonrpc_code: int
    http_status: int
    grpc_status: str
    reason: str


# The map's `a2a.errors` table (v1.0.1 HTTP/gRPC columns), plus JSON-RPC's own codes.
ERROR_ROWS: dict[type[A2AError], ErrorRow] = {
    TaskNotFoundError: ErrorRow(-32001, 404, "NOT_FOUND", "TASK_NOT_FOUND"),
    TaskNotCancelableError: ErrorRow(-32002, 400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"),
    PushNotificationNotSupportedError: ErrorRow(-32003, 400, "FAILED_PRECONDITION", "PUSH_NOTIFICATION_NOT_SUPPORTED"),
    UnsupportedOperationError: ErrorRow(-32004, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION"),
    ContentTypeNotSupportedError: ErrorRow(-32005, 400, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED"),
    InvalidAgentResponseError: ErrorRow(-32006, 500, "INTERNAL", "INVALID_AGENT_RESPONSE"),
    ExtendedAgentCardNotConfiguredError: ErrorRow(
        -32007, 400, "FAILED_PRECONDITION", "EXTENDED_AGENT_CARD_NOT_CONFIGURED"
    ),
    ExtensionSupportRequiredError: ErrorRow(-32008, 400, "FAILED_PRECONDITION", "EXTENSION_SUPPORT_REQUIRED"),
    VersionNotSupportedError: ErrorRow(-32009, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED"),
    JSONParseError: ErrorRow(-32700, 400, "INVALID_ARGUMENT", "PARSE_ERROR"),
    InvalidRequestError: ErrorRow(-32600, 400, "INVALID_ARGUMENT", "INVALID_REQUEST"),
    MethodNotFoundError: ErrorRow(-32601, 404, "NOT_FOUND", "METHOD_NOT_FOUND"),
    InvalidParamsError: ErrorRow(-32602, 400, "INVALID_ARGUMENT", "INVALID_PARAMS"),
    InternalError: ErrorRow(-32603, 500, "INTERNAL", "INTERNAL_ERROR"),
    # Not an A2A error type. A2A §3.3.2 requires refusing bad credentials and gives HTTP 401 (with a
    # challenge: WWW-Authenticate) as the example; a2a-sdk clients act on that status before reading
    # any body. The JSON-RPC body needs some code: -32600 (the request is not acceptable as sent)
    # rather than a custom -32000-range code no client maps, with reason UNAUTHENTICATED naming
    # the cause. The A2A TCK (1.0-dev) sends no credentials and has no test of this answer.
    AuthenticationRequired: ErrorRow(-32600, 401, "UNAUTHENTICATED", "UNAUTHENTICATED"),
}

AUTHENTICATE_HEADER = 'Bearer realm="openwop"'


def error_row(error: A2AError) -> ErrorRow:
    return ERROR_ROWS.get(type(error), ERROR_ROWS[InternalError])


def _string_metadata(error: A2AError) -> dict[str, str]:
    data = error.data if isinstance(error.data, dict) else {}
    return {str(k): v for k, v in data.items() if isinstance(v, str)}


def error_details(error: A2AError) -> list[dict[str, Any]]:
    """The typed-details array: exactly one ErrorInfo, then a BadRequest for field violations."""
    details: list[dict[str, Any]] = [
        {
            "@type": ERROR_INFO_TYPE,
            "reason": error_row(error).reason,
            "domain": A2A_DOMAIN,
            "metadata": _string_metadata(error),
        }
    ]
    violations = error.data.get("fieldViolations") if isinstance(error.data, dict) else None
    if violations:
        details.append({"@type": BAD_REQUEST_TYPE, "fieldViolations": violations})
    return details


def invalid_params(message: str, *, field: str | None = None) -> InvalidParamsError:
    """-32602 with the offending field both as ErrorInfo metadata and as a BadRequest violation."""
    data: dict[str, Any] = {}
    if field is not None:
        data = {"field": field, "fieldViolations": [{"field": field, "description": message}]}
    return InvalidParamsError(message, data=data)


def jsonrpc_error_body(error: A2AError, request_id: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": error_row(error).jsonrpc_code, "message": error.message, "data": error_details(error)},
    }


def rest_error_body(error: A2AError) -> tuple[int, dict[str, Any]]:
    """google.rpc.Status in AIP-193 form: `error.code` repeats the HTTP status."""
    row = error_row(error)
    return row.http_status, {
        "error": {
            "code": row.http_status,
            "status": row.grpc_status,
            "message": error.message,
            "details": error_details(error),
        }
    }
