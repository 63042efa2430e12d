"""The OpenWOP contract this host serves and which paths belong to the protocol surface.

versioning.md §1.4: every protocol response carries `OpenWOP-Version` naming the contract that
answered; a request naming an unlisted major is `406 protocol_version_unsupported`. Host-private
pages (admin, console) and the A2A/MCP interface URLs are not protocol responses of the REST wire:
they get no `OpenWOP-Version` and never the OpenWOP envelope (interop.md §A2A error details).
"""

from __future__ import annotations

import re

from apps.core.errors import ProtocolVersionUnsupported, ValidationFailed

# The corpus release this host is built against (major.minor); the only contract it serves.
CONTRACT_VERSION = "2.46"
PROTOCOL_VERSIONS: tuple[str, ...] = (CONTRACT_VERSION,)
PREFERRED_VERSION = CONTRACT_VERSION

_VERSION_RE = re.compile(r"^\s*(0|[1-9]\d*)(?:\.(0|[1-9]\d*))?\s*$")

# Host-private JSON API (versioning.md §5 `/host/<org>/...`): enveloped errors, but served
# regardless of `OpenWOP-Version` and never stamped with it.
VENDOR_API_PREFIX = "/host/openwop-host/api/"

# Paths that are neither the REST wire nor the vendor API: no header, no envelope.
NOT_ENVELOPED_PREFIXES: tuple[str, ...] = (
    "/admin/",
    "/static/",
    "/host/openwop-host/",  # host-private pages (console, auditor views)
    "/console/",  # the tenant console: HTML pages with its own 403/404
    "/a2a",  # A2A interfaces: JSON-RPC / google.rpc.Status errors only
    "/mcp",  # MCP mount: JSON-RPC errors only
    "/.well-known/agent-card.json",
    "/healthz",
    "/readyz",
)


def is_vendor_api_path(path: str) -> bool:
    return path.startswith(VENDOR_API_PREFIX)


# Exact paths that are no part of the wire either: `/`, the host's HTML front door.
NOT_ENVELOPED_PATHS = frozenset({"/"})


def is_protocol_path(path: str) -> bool:
    """A path of the REST wire: version-checked, stamped, enveloped."""
    excluded = path.startswith(NOT_ENVELOPED_PREFIXES) or path in NOT_ENVELOPED_PATHS
    return not is_vendor_api_path(path) and not excluded


def wants_envelope(path: str) -> bool:
    return is_vendor_api_path(path) or is_protocol_path(path)


def select_contract(header_value: str | None) -> str:
    """The contract answering a request with this `OpenWOP-Version` header (absent: preferred)."""
    if header_value is None or header_value == "":
        return PREFERRED_VERSION
    match = _VERSION_RE.match(header_value)
    if not match:
        raise ValidationFailed(
            "OpenWOP-Version must be a major or major.minor version.",
            details={"header": "OpenWOP-Version", "protocolVersions": list(PROTOCOL_VERSIONS)},
        )
    major = match.group(1)
    for version in PROTOCOL_VERSIONS:
        if version.split(".")[0] == major:
            return version
    raise ProtocolVersionUnsupported(
        f"OpenWOP major {major} is not served by this host.",
        details={"protocolVersions": list(PROTOCOL_VERSIONS)},
    )
