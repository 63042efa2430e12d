"""One MCP exchange: the checks every request passes before dispatch, and what they establish.

The ladder (2026-07-28 basic/index + streamable HTTP; the order mcp 2.3.0 uses): `params._meta`
carries the protocol version (-32602), the HTTP routing headers agree with the body (-32020, before
any version is judged), `clientCapabilities` is an object (-32602; interop map c.6 `meta` keeps
-32021 for a single capability the request needed and did not declare); only then
is the version negotiated, once, through `negotiation_decide` (-32022 on refusal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp.shared.inbound import decode_header_value
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.jsonrpc import HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from apps.facets.negotiation import Decision
from apps.mcp.errors import McpError, invalid_params
from apps.runs.trace_context import TRACESTATE_MAX, traceparent_valid
from apps.tenants.subject import Subject

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

# Body params the `Mcp-Name` header mirrors: the core three, and the tasks extension's taskId.
NAME_PARAM_BY_METHOD: dict[str, str] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}


@dataclass(frozen=True, slots=True)
class TraceContext:
    traceparent: str
    tracestate: str


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the per-request `_meta` declares (self-reported: never authority)."""

    requested_version: str
    capabilities: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Exchange:
    subject: Subject
    version: str
    capabilities: dict[str, Any]
    trace: TraceContext | None = None
    # HTTP only: the request's headers, lower-cased, when it named any `Mcp-Param-*` or is a
    # tools/call (SEP-2243: checked against the tool's `x-mcp-header` parameters); None on stdio.
    param_headers: Mapping[str, str] | None = None

    @property
    def handshake(self) -> bool:
        """A handshake-era (session) exchange: no MRTR, no extensions (apps/mcp/handshake.py)."""
        return self.version not in MODERN_PROTOCOL_VERSIONS

    @property
    def tasks_declared(self) -> bool:
        extensions = self.capabilities.get("extensions")
        return isinstance(extensions, dict) and TASKS_EXTENSION in extensions

    @property
    def elicitation_form(self) -> bool:
        # An empty `elicitation: {}` is form-only (the pre-URL-mode shape).
        elicitation = self.capabilities.get("elicitation")
        return isinstance(elicitation, dict) and (not elicitation or "form" in elicitation)

    @property
    def elicitation_url(self) -> bool:
        elicitation = self.capabilities.get("elicitation")
        return isinstance(elicitation, dict) and "url" in elicitation


def envelope_read(params: Any) -> Envelope:
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(meta.get(PROTOCOL_VERSION_META_KEY), str):
        raise invalid_params(
            f"params._meta must be an object carrying {PROTOCOL_VERSION_META_KEY!r} "
            f"and {CLIENT_CAPABILITIES_META_KEY!r}"
        )
    capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY)
    return Envelope(
        requested_version=meta[PROTOCOL_VERSION_META_KEY],
        capabilities=dict(capabilities) if isinstance(capabilities, Mapping) else {},
    )


def capabilities_check(params: Any) -> None:
    """Without a `clientCapabilities` object the request is malformed (-32602, as mcp 2.3.0 and the
    conformance suite answer); -32021 names one capability a request needed and did not declare."""
    meta = params["_meta"]
    if not isinstance(meta.get(CLIENT_CAPABILITIES_META_KEY), Mapping):
        raise invalid_params(f"params._meta must carry {CLIENT_CAPABILITIES_META_KEY!r} as an object")


def headers_check(*, body: Mapping[str, Any], envelope: Envelope, headers: Mapping[str, str]) -> None:
    """HTTP only: the routing headers must say what the body says (-32020, HTTP 400)."""
    if headers.get("mcp-protocol-version") != envelope.requested_version:
        raise McpError(HEADER_MISMATCH, "MCP-Protocol-Version header does not match params._meta protocolVersion")
    method = body.get("method")
    if headers.get("mcp-method") != method:
        raise McpError(HEADER_MISMATCH, "Mcp-Method header does not match the request body's method")
    name_key = NAME_PARAM_BY_METHOD.get(method) if isinstance(method, str) else None
    if name_key is not None:
        value = body["params"].get(name_key)
        if decode_header_value(headers.get("mcp-name")) != value:
            raise McpError(HEADER_MISMATCH, f"Mcp-Name header does not match the request body's {name_key!r}")


MCP_PARAM_HEADER_PREFIX = "mcp-param-"


def name_and_arguments(params: Mapping[str, Any], noun: str) -> tuple[str, dict[str, Any]]:
    """`params.name` and `params.arguments` of a tools/call or prompts/get (-32602 when malformed)."""
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise invalid_params(f"params.name must name a {noun}")
    arguments = params.get("arguments")
    arguments = {} if arguments is None else arguments
    if not isinstance(arguments, dict):
        raise invalid_params("params.arguments must be an object")
    return name, arguments


def param_headers_read(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """The `Mcp-Param-*` headers of an HTTP request (the names already lower-cased)."""
    if headers is None:
        return None
    return {name: value for name, value in headers.items() if name.startswith(MCP_PARAM_HEADER_PREFIX)}


def refusal_error(decision: Decision, requested: str, code: int = UNSUPPORTED_PROTOCOL_VERSION) -> McpError:
    """A refused revision (-32022; the handshake-era revisions answer -32600, HTTP 400 either way)."""
    data = {"supported": list(decision.supported), "requested": requested}
    return McpError(code, "Unsupported protocol version", data)


def trace_context_read(params: Any, headers: Mapping[str, str] | None) -> TraceContext | None:
    """interop.md §Trace context: `_meta` wins over the header (none on stdio); a malformed value
    is ignored."""
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    carrier: Mapping[str, Any] = meta if isinstance(meta, Mapping) and "traceparent" in meta else headers or {}
    parent, state = carrier.get("traceparent"), carrier.get("tracestate")
    if not isinstance(parent, str) or not traceparent_valid(parent.strip()):
        return None
    tracestate = state.strip() if isinstance(state, str) and len(state) <= TRACESTATE_MAX else ""
    return TraceContext(traceparent=parent.strip(), tracestate=tracestate)
