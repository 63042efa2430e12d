"""The MCP 2026-07-28 server mount: registers what it really serves with the facets app."""

from __future__ import annotations

from django.apps import AppConfig

# The mcp.features[] this app implements (interop map c.6); `extensions` is the tasks extension.
SERVED_FEATURES = ("server-discover", "mrtr", "cacheable-lists", "extensions")


class MCPConfig(AppConfig):
    name = "apps.mcp"
    label = "mcp"
    verbose_name = "MCP server mount"

    def ready(self) -> None:
        from apps.facets import surfaces

        surfaces.register_surface(surfaces.MCP_STREAMABLE_HTTP)
        surfaces.register_surface(surfaces.MCP_STDIO)
        for feature in SERVED_FEATURES:
            surfaces.register_surface(surfaces.MCP_FEATURE_PREFIX + feature)

        from apps.core.request_limits import register_refusal_renderer
        from apps.mcp.refusals import mcp_refusal

        register_refusal_renderer("/mcp", mcp_refusal)  # limits answer in MCP's wire, never the envelope
