"""Handshake-era revisions (2025-06-18, 2025-11-25) on the same mount, when the operator offers them.

Today's desktop clients still open with `initialize`. When `mcp.revisions` lists a handshake-era
revision at or above the floor, the mount answers it (MCP lifecycle): `initialize` negotiates the
revision through `negotiation_decide` (one `negotiation.decided` record), answers serverInfo and
capabilities, and mints an `Mcp-Session-Id`; every later request names the session and carries
`MCP-Protocol-Version` equal to the session's revision, and is negotiated again (its own record).
DELETE ends the session. An unknown, ended, lapsed or someone else's session is 404; a request
without one is 400 (streamable HTTP 2025-06-18 §Session Management).

Only the core methods exist at these revisions: ping, tools/list, tools/call. There is no MRTR and
no tasks extension (both are 2026-07-28): a tool that may ask for approval, input or a connection
is refused as a tool error before any run exists, and a run that still stops for input answers a
tool error naming the run (it keeps waiting for REST or the console).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mcp_types import PROTOCOL_VERSION_META_KEY
from mcp_types.jsonrpc import INVALID_REQUEST

from apps.core.protocol_versions import version_key
from apps.facets.negotiation import Decision, inbound_peer_origin, negotiation_decide
from apps.facets.services import facet_ensure
from apps.mcp.dispatch import INSTRUCTIONS, READ_METHODS, dispatch_begin, server_capabilities
from apps.mcp.errors import McpError, invalid_params, method_not_found
from apps.mcp.exchange import Exchange, refusal_error, trace_context_read
from apps.mcp.models import McpSession
from apps.mcp.notifications import RunFinish
from apps.mcp.projection import SERVER_NAME, SERVER_VERSION
from apps.mcp.sessions import session_get, session_open
from apps.mcp.tools import Finish, settled
from apps.tenants.subject import Subject

HANDSHAKE_REVISIONS = ("2025-06-18", "2025-11-25")
# What a request without MCP-Protocol-Version means (streamable HTTP 2025-06-18; map c.6 headers).
HEADERLESS_REVISION = "2025-03-26"
SESSION_HEADER = "Mcp-Session-Id"
_MODERN_ONLY_KEYS = ("resultType", "ttlMs", "cacheScope")


def handshake_revisions_offered(floor_version: str | None = None) -> list[str]:
    """The handshake-era revisions the operator offers at or above the floor, newest first: the
    host floor, or `floor_version` (an exchange's effective floor, its tenant's policy included)."""
    facet = facet_ensure(protocol="mcp")
    floor = version_key("mcp", floor_version or facet.minimum_version)
    offered = [v for v in facet.versions if v in HANDSHAKE_REVISIONS and version_key("mcp", v) >= floor]
    return sorted(offered, key=lambda v: version_key("mcp", v), reverse=True)


def modern_envelope(params: Any) -> bool:
    """Does the request carry the 2026-07-28 `_meta` envelope (so the stateless ladder claims it)?"""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


def session_missing() -> McpError:
    return McpError(INVALID_REQUEST, "Bad Request: Missing session ID", http_status=400)


def session_unknown() -> McpError:
    # One answer for unknown, ended, lapsed and another caller's session: the same bytes but the id.
    return McpError(INVALID_REQUEST, "Session not found", http_status=404)


def _decide(subject: Subject, requested: str, origin: str | None) -> Decision:
    return negotiation_decide(
        protocol="mcp",
        requested=requested,
        peer_origin=inbound_peer_origin(origin_header=origin, subject=subject),
        subject=subject,
        run=None,
    )


def initialize_decide(subject: Subject, params: Any, origin: str | None) -> dict[str, Any]:
    """Negotiate an `initialize` (one record) and return its InitializeResult; no session yet."""
    if not isinstance(params, Mapping):
        raise invalid_params("params must be an object")
    requested = params.get("protocolVersion")
    if not isinstance(requested, str) or not requested:
        raise invalid_params("params.protocolVersion must name a revision")
    decision = _decide(subject, requested, origin)
    offered = handshake_revisions_offered(decision.floor)  # never below the caller's tenant's floor
    if decision.accepted and decision.version in HANDSHAKE_REVISIONS:
        version = str(decision.version)
    elif offered:
        # Lifecycle: a revision we cannot speak is answered with the newest one we can; the client
        # decides whether to go on. The record says what was requested and that it was refused.
        version = offered[0]
    else:
        raise refusal_error(decision, requested, INVALID_REQUEST)
    return {
        "protocolVersion": version,
        "capabilities": server_capabilities(),
        "serverInfo": {"name": SERVER_NAME, "version": SERVER_VERSION},
        "instructions": INSTRUCTIONS,
    }


def initialize(subject: Subject, params: Any, origin: str | None) -> tuple[dict[str, Any], str]:
    """`initialize` over HTTP: negotiated as `initialize_decide`, then a session for the revision."""
    result = initialize_decide(subject, params, origin)
    capabilities = params.get("capabilities")
    session_id = session_open(
        subject=subject,
        protocol_version=result["protocolVersion"],
        client_capabilities=dict(capabilities) if isinstance(capabilities, Mapping) else {},
    )
    return result, session_id


def connection_exchange(
    subject: Subject,
    version: str,
    requested: str,
    params: Any,
    origin: str | None,
    headers: Mapping[str, str] | None = None,
) -> Exchange:
    """A handshake-era exchange on a connection or session that negotiated `version`: negotiated
    again, once (its own record), and refused if that revision is no longer on offer."""
    decision = _decide(subject, requested, origin)
    if not decision.accepted or decision.version != version:
        raise refusal_error(decision, requested, INVALID_REQUEST)
    trace = trace_context_read(params, headers)
    # No MRTR and no extensions at these revisions: the exchange grants no elicitation or tasks.
    return Exchange(subject=subject, version=version, capabilities={}, trace=trace)


def session_of(subject: Subject, headers: Mapping[str, str]) -> McpSession:
    """The caller's live session the request names; refused otherwise (a notification too)."""
    session_id = headers.get(SESSION_HEADER.lower())
    if not session_id:
        raise session_missing()
    session = session_get(subject=subject, session_id=session_id)
    if session is None:
        raise session_unknown()
    return session


def session_exchange(subject: Subject, headers: Mapping[str, str], params: Any, origin: str | None) -> Exchange:
    session = session_of(subject, headers)
    requested = headers.get("mcp-protocol-version") or HEADERLESS_REVISION
    return connection_exchange(subject, session.protocol_version, requested, params, origin, headers)


def legacy_result(result: dict[str, Any]) -> dict[str, Any]:
    """A 2026-07-28 result in its handshake-era shape: no resultType or cache hints."""
    return {key: value for key, value in result.items() if key not in _MODERN_ONLY_KEYS}


async def handshake_dispatch_begin(exchange: Exchange, method: str, params: Any) -> Finish:
    """dispatch_begin for the methods these revisions have, their results less the modern-only keys."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise invalid_params("params must be an object")
    if method == "ping":
        return settled({})
    if method != "tools/call" and method not in READ_METHODS:
        raise method_not_found(method)
    if method == "tools/call":
        # requestState / inputResponses are 2026-07-28 (MRTR) words: at these revisions they mean nothing.
        params = {key: value for key, value in params.items() if key not in ("requestState", "inputResponses")}
    finish = await dispatch_begin(exchange, method, params)

    async def legacy_finish() -> dict[str, Any]:
        return legacy_result(await finish())

    if isinstance(finish, RunFinish):  # still the run's step: its log and progress can be told
        return dataclasses.replace(finish, step=legacy_finish)
    return legacy_finish
