"""Tenant-bound ids and their one-segment wire projection (identity.md §5, RFC 0184).

A tenant-bound id is `<tenant>/<opaque>` in bodies. In a URL path it travels as one segment: every
UTF-8 byte outside `[A-Za-z0-9._-]` becomes `~HH` (uppercase hex). Decoding also accepts `%HH`
(the legacy `%2F`); a `~` or `%` not followed by two hex digits is `400 validation_error`.
"""

from __future__ import annotations

import re
import secrets

from apps.core.errors import ValidationFailed

OPAQUE_RE = re.compile(r"^[A-Za-z0-9._~-]{16,128}$")
BOUND_ID_RE = re.compile(r"^(anon:)?[A-Za-z0-9._~-]{1,128}/[A-Za-z0-9._~-]{16,128}$")
# Slugs we mint for tenants: the tenantId grammar minus `~` and the anon: prefix (never minted here).
TENANT_SLUG_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")

_PASSTHROUGH = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_ESCAPE_RE = re.compile(rb"[~%]([0-9A-Fa-f]{2})?")


def mint_opaque(length: int = 26) -> str:
    """A host-minted opaque segment: `length` chars of base64url (6 bits each), never `~`.

    26 characters carry 156 bits, above the 128 the MCP tasks extension asks of a taskId.
    """
    if not 22 <= length <= 128:
        raise ValueError("opaque segments carry at least 128 bits and at most 128 characters")
    # token_urlsafe is base64url (A-Z, a-z, 0-9, `-`, `_`) of random bytes: every whole 6-bit group is
    # uniform, and enough bytes are drawn that the first `length` characters are whole groups.
    return secrets.token_urlsafe((length * 6 + 7) // 8 + 1)[:length]


def mint_bound_id(tenant: str) -> str:
    """A fresh tenant-bound id `<tenant>/<opaque>`."""
    return f"{tenant}/{mint_opaque()}"


def project_id(bound: str) -> str:
    """Bound form -> one path segment (`acme/xyz` -> `acme~2Fxyz`). Projects exactly once."""
    return "".join(chr(b) if b in _PASSTHROUGH else f"~{b:02X}" for b in bound.encode("utf-8"))


def unproject_id(wire: str) -> str:
    """One path segment -> bound form. Accepts `~HH` and `%HH`; a dangling escape is refused."""
    try:
        return _ESCAPE_RE.sub(_unescape, wire.encode("utf-8")).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationFailed("The id does not decode to UTF-8.", details={"field": "id"}) from exc


def _unescape(escape: re.Match[bytes]) -> bytes:
    if escape.group(1) is None:
        raise ValidationFailed("An escape in the id is not followed by two hex digits.", details={"field": "id"})
    return bytes((int(escape.group(1), 16),))


def split_bound_id(bound: str) -> tuple[str, str]:
    """`tenant/opaque` -> (tenant, opaque); a bare or malformed id is `400 validation_error`."""
    if not BOUND_ID_RE.match(bound):
        raise ValidationFailed("The id is not a tenant-bound id.", details={"field": "id"})
    tenant, _, opaque = bound.partition("/")
    return tenant, opaque
