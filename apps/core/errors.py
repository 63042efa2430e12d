"""The host's error hierarchy (STYLE.md habit 7).

Each error carries its registered OpenWOP code (spec/v2/errors.json) and HTTP status. REST renders
it as the closed envelope `{error, message, details?}`; the A2A and MCP doors map the same
exceptions to their own JSON-RPC errors, never to this envelope.
"""

from __future__ import annotations

import re
from typing import Any

# Registered codes this host emits, with the status the registry gives them
# (error-envelope.schema.json `x-openwop-http-status`; tests check this table against it).
REGISTERED_STATUS: dict[str, int] = {
    "validation_error": 400,
    "interop_version_unsupported": 400,
    "webhook_url_rejected": 400,
    "idempotency_key_invalid": 400,
    "unsupported_stream_mode": 400,
    "unauthenticated": 401,
    "credential_revoked": 401,
    "identity_unverified": 401,
    "identity_unresolvable": 401,
    "audience_mismatch": 401,
    "credential_lifetime_exceeded": 401,
    "forbidden": 403,
    "id_tenant_mismatch": 403,
    "not_found": 404,
    "interrupt_not_found": 404,
    "protocol_version_unsupported": 406,
    "run_terminal": 409,
    "run_state_conflict": 409,
    "interrupt_already_resolved": 409,
    "idempotency_in_flight": 409,
    "idempotency_key_mismatch": 409,
    "version_conflict": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "capability_required": 422,
    "mcp_mrtr_rounds_exceeded": 422,
    "rate_limited": 429,
    "internal_error": 500,
}


# Vendor codes (spec/v2/core/errors.md: "a registered code, or a vendor code"): what the registry
# has no row for and no registered row genuinely means. They live under this host's org segment
# (as its discovery extensions do) and match the registry's `vendorCodePattern`; each declares its
# own status here, so one table answers "which status?" for every code the host can emit.
VENDOR_ORG = "openwop-host"
VENDOR_CODE_PATTERN = re.compile(r"^(?!openwop\.)[a-z][a-z0-9]*(-[a-z0-9]+)*\.[a-z][a-z0-9_]*$")
VENDOR_STATUS: dict[str, int] = {}


def vendor_code(name: str, status: int) -> str:
    """Register `openwop-host.<name>` with its HTTP status and return the code. Called at import by
    the app that emits it; a malformed name, a non-error status or a clashing re-registration fails
    loudly there, never on the wire."""
    code = f"{VENDOR_ORG}.{name}"
    if not VENDOR_CODE_PATTERN.fullmatch(code):
        raise ValueError(f"{code!r} does not match the registry's vendorCodePattern")
    if not 400 <= status <= 599:
        raise ValueError(f"{code!r}: {status} is not an error status")
    if VENDOR_STATUS.setdefault(code, status) != status:
        raise ValueError(f"{code!r} registered twice with different statuses")
    return code


def error_status(code: str) -> int | None:
    """The HTTP status of a registered or vendor code this host emits; None for any other string
    (which the host must not emit: callers render those as internal_error)."""
    return REGISTERED_STATUS.get(code) or VENDOR_STATUS.get(code)


class OpenWopError(Exception):
    """Base of every error a door can render. Subclasses fix `code`; status comes from the table."""

    code: str = "internal_error"
    default_message: str = "Internal error."

    def __init__(
        self,
        message: str | None = None,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        status: int | None = None,
    ) -> None:
        self.message = message or self.default_message
        self.details = details
        self.headers = headers or {}
        self._status = status
        super().__init__(self.message)

    @property
    def status(self) -> int:
        status = self._status or error_status(self.code)
        if status is None:
            raise KeyError(f"{self.code!r} is neither a registered nor a vendor code")
        return status

    def envelope(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class ValidationFailed(OpenWopError):
    code = "validation_error"
    default_message = "The request is not valid."


class Unauthenticated(OpenWopError):
    code = "unauthenticated"
    default_message = "A valid bearer credential is required."

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.headers.setdefault("WWW-Authenticate", 'Bearer realm="openwop"')


class CredentialRevoked(Unauthenticated):
    code = "credential_revoked"
    default_message = "The credential has been revoked."


# identity.md §2.1 / §6: the specific refusals of a presented credential (all 401, fail closed).
class IdentityUnverified(Unauthenticated):
    code = "identity_unverified"
    default_message = "The credential could not be verified."


class IdentityUnresolvable(Unauthenticated):
    code = "identity_unresolvable"
    default_message = "The credential does not resolve to a Subject of this host."


class AudienceMismatch(Unauthenticated):
    code = "audience_mismatch"
    default_message = "The credential is not addressed to this host."


class CredentialLifetimeExceeded(Unauthenticated):
    code = "credential_lifetime_exceeded"
    default_message = "The credential's lifetime exceeds the advertised bound."


class Forbidden(OpenWopError):
    code = "forbidden"
    default_message = "The caller may not do this."


class TenantMismatch(OpenWopError):
    """REST's answer for an id whose tenant segment is not the caller's (never on A2A/MCP)."""

    code = "id_tenant_mismatch"
    default_message = "The id does not belong to the caller's tenant."


class NotFound(OpenWopError):
    code = "not_found"
    default_message = "Not found."


class ProtocolVersionUnsupported(OpenWopError):
    code = "protocol_version_unsupported"
    default_message = "The requested OpenWOP version is not served here."


class Conflict(OpenWopError):
    """A 409 whose code the raiser names (run_terminal, interrupt_already_resolved, ...)."""

    def __init__(self, code: str, message: str, **kwargs: Any) -> None:
        self.code = code
        super().__init__(message, **kwargs)


class PayloadTooLarge(OpenWopError):
    code = "payload_too_large"
    default_message = "The request body is too large."


class RateLimited(ValidationFailed):
    """429 `rate_limited` with the Retry-After the registry requires (errors.md). A refusal of the
    caller's pace, not a server fault: it subclasses ValidationFailed so a door that maps request
    refusals (A2A invalid params, MCP -32602) maps this one too instead of calling it internal."""

    code = "rate_limited"
    default_message = "Too many requests; retry later."

    def __init__(self, message: str | None = None, *, retry_after: int, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = max(1, int(retry_after))
        self.headers["Retry-After"] = str(self.retry_after)


class InternalError(OpenWopError):
    code = "internal_error"
    default_message = "The host could not complete the request."


OVERLOADED = vendor_code("overloaded", 503)


class Overloaded(OpenWopError):
    """503: every database connection stayed busy past the pool's timeout (apps/core/overload.py).
    The registry's 503 rows name a runner and a pack registry; neither is what ran out here."""

    code = OVERLOADED
    default_message = "The host is saturated; retry shortly."

    def __init__(self, message: str | None = None, *, retry_after: int, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.headers["Retry-After"] = str(max(1, int(retry_after)))


REQUEST_TIMEOUT = vendor_code("request_timeout", 408)


class RequestTimeout(OpenWopError):
    """408: the request's body did not arrive within the host's deadline (apps/core/read_deadline.py).
    The registry has no row for a client too slow to send its request."""

    code = REQUEST_TIMEOUT
    default_message = "The request body did not arrive in time."
