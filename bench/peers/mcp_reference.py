"""The peer for the MCP scenario: an `mcp` SDK `MCPServer` streamable-HTTP app with one no-op tool.

Runs in the bench's peer venv. Requests carry `MCP-Protocol-Version: 2026-07-28`, which the SDK
routes to its stateless single-exchange entry (the revision our /mcp mount speaks); JSON responses
(no SSE framing) like ours. Not durable: the tool returns at once, nothing is stored.

    uvicorn --factory peers.mcp_reference:app_factory   (run from bench/)
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette


def app_factory() -> Starlette:
    server = MCPServer("bench reference")

    @server.tool(name="noop", description="Completes at once with empty outputs.")
    def noop() -> dict[str, Any]:
        return {}

    return server.streamable_http_app(json_response=True, stateless_http=True)
