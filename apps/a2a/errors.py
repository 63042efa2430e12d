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

from apps.core.errors import RateLimited, Unauthenticated, ValidationFailed

ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
A2A_DOMAIN = "a2a-protocol.org"


class AuthenticationRequired(A2AError):
    """No usable bearer credential. One fixed message for every plain `unauthenticated` refusal
    (missing, malformed, unknown), so the answer discloses nothing about which it was.

    The identity chapter's specific refusals (identity.md §2.1, §6: identity_unverified,
    identity_unresolvable, audience_mismatch, credential_revoked, credential_lifetime_exceeded)
    reach the wire: raised inside the door's `except` of that refusal (`raise
    AuthenticationRequired() from None`), the answer carries its code as ErrorInfo metadata
    `openwopError` and its message (`identity_refusal`)."""

    message = "A valid bearer credential is required."


class InsufficientScope(A2AError):
    """The caller's access token lacks a scope its issuer requires for the `a2a` method family
    (identity.md §2.5): HTTP 403 with the scope challenge (apps/oauth/challenge.py), gRPC
    PERMISSION_DENIED; ErrorInfo metadata `requiredScopes` lists them (space separated)."""

    message = "The access token lacks a scope this interface requires."

    def __init__(self, *, scopes: tuple[str, ...] = (), challenge: str = 'Bearer error="insufficient_scope"') -> None:
        message = f"{self.message[:-1]} ({' '.join(scopes)})." if scopes else self.message
        super().__init__(message, data={"requiredScopes": " ".join(scopes)} if scopes else None)
        self.challenge = challenge  # the WWW-Authenticate value the 403 carries


class RateLimitExceeded(A2AError):
    """A tenant budget spent (apps/tenants/budgets.py), found while dispatching: the same row as a
    rate refusal before dispatch (apps/a2a/refusals.py): JSON-RPC -32000, HTTP 429 with
    Retry-After, gRPC RESOURCE_EXHAUSTED, reason RATE_LIMIT_EXCEEDED; ErrorInfo metadata names the
    budget, its limit and retryAfterSeconds."""

    message = "Too many requests; retry later."

    def __init__(self, message: str | None = None, *, retry_after: int = 1, data: dict[str, Any] | None = None) -> None:
        super().__init__(message, data=data)
        self.retry_after = retry_after


def rate_limit_exceeded(exc: RateLimited) -> RateLimitExceeded:
    metadata = {str(k): str(v) for k, v in (exc.details or {}).items()}
    metadata["retryAfterSeconds"] = str(exc.retry_after)
    return RateLimitExceeded(exc.message, retry_after=exc.retry_after, data=metadata)


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
    # Not an A2A error type either: RFC 6750 §3.1 insufficient_scope is a 403 (same -32600 reasoning).
    InsufficientScope: ErrorRow(-32600, 403, "PERMISSION_DENIED", "INSUFFICIENT_SCOPE"),
    # Not an A2A error type: JSON-RPC's implementation-defined server error, as refusals.py's rows.
    RateLimitExceeded: ErrorRow(-32000, 429, "RESOURCE_EXHAUSTED", "RATE_LIMIT_EXCEEDED"),
}

AUTHENTICATE_HEADER = 'Bearer realm="openwop"'


def error_row(error: A2AError) -> ErrorRow:
    return ERROR_ROWS.get(type(error), ERROR_ROWS[InternalError])


def identity_refusal(error: A2AError) -> Unauthenticated | None:
    """The specific identity refusal an AuthenticationRequired stands for: the Unauthenticated it
    was raised while handling (`__context__`, kept by `raise ... from None`), unless that is the
    plain `unauthenticated`, whose bytes stay the one fixed answer."""
    if not isinstance(error, AuthenticationRequired):
        return None
    refusal = error.__context__
    if isinstance(refusal, Unauthenticated) and refusal.code != Unauthenticated.code:
        return refusal
    return None


def error_message(error: A2AError) -> str:
    refusal = identity_refusal(error)
    return refusal.message if refusal is not None else error.message


def error_details(error: A2AError) -> list[dict[str, Any]]:
    """The typed-details array: exactly one ErrorInfo (string metadata only), then a BadRequest
    for field violations."""
    data = error.data if isinstance(error.data, dict) else {}
    metadata = {str(k): v for k, v in data.items() if isinstance(v, str)}
    refusal = identity_refusal(error)
    if refusal is not None:
        metadata["openwopError"] = refusal.code
    details: list[dict[str, Any]] = [
        {"@type": ERROR_INFO_TYPE, "reason": error_row(error).reason, "domain": A2A_DOMAIN, "metadata": metadata}
    ]
    if data.get("fieldViolations"):
        details.append({"@type": BAD_REQUEST_TYPE, "fieldViolations": data["fieldViolations"]})
    return details


def invalid_params(message: str, *, field: str | None = None) -> InvalidParamsError:
    """-32602 with the offending field both as ErrorInfo metadata and as a BadRequest violation."""
    data: dict[str, Any] = {}
    if field is not None:
        data = {"field": field, "fieldViolations": [{"field": field, "description": message}]}
    return InvalidParamsError(message, data=data)


def invalid_input(exc: ValidationFailed) -> InvalidParamsError:
    """A value refused at parse (apps/core/caller_input.py), or one the database refused
    (api_errors.data_error_refusal), as -32602 / 400 / INVALID_ARGUMENT naming its field."""
    field = exc.details.get("field") if exc.details else None
    return invalid_params(exc.message, field=field if isinstance(field, str) else None)


def jsonrpc_error_body(error: A2AError, request_id: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": error_row(error).jsonrpc_code, "message": error_message(error), "data": error_details(error)},
    }


def rest_error_body(error: A2AError) -> tuple[int, dict[str, Any]]:
    """google.rpc.Status in AIP-193 form: `error.code` repeats the HTTP status."""
    row = error_row(error)
    return row.http_status, {
        "error": {
            "code": row.http_status,
            "status": row.grpc_status,
            "message": error_message(error),
            "details": error_details(error),
        }
    }
