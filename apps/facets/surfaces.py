"""What the host really serves. Protocol apps register their surfaces at start-up; discovery
advertises a facet (and each optional facet field) only for a registered surface, so a facet for
a surface that does not exist is never advertised (capabilities.md: the record is the claim)."""

from __future__ import annotations

A2A = "a2a"  # public agent card + JSON-RPC interface
A2A_STREAMING = "a2a.streaming"
A2A_PUSH = "a2a.push"
A2A_DURABLE_TASKS = "a2a.durable-tasks"
A2A_AGENT_CARDS = "a2a.agent-cards"
MCP_STREAMABLE_HTTP = "mcp.streamable-http"
MCP_STDIO = "mcp.stdio"
MCP_FEATURE_PREFIX = "mcp.feature:"
MCP_CLIENT = "mcp.client"  # the ctx.mcp host service: workflows call bound MCP servers (RFC 0204)
PURPOSE_PROPAGATION = "purpose-propagation"  # labels re-emitted on onward hops (security-defaults.md)

_served: set[str] = set()


def register_surface(name: str) -> None:
    _served.add(name)


def unregister_surface(name: str) -> None:
    _served.discard(name)


def is_served(name: str) -> bool:
    return name in _served


def mcp_served() -> bool:
    return is_served(MCP_STREAMABLE_HTTP) or is_served(MCP_STDIO)
