"""The MCP 2026-07-28 server mount: registers what it really serves with the facets app."""

from __future__ import annotations

from django.apps import AppConfig

# The mcp.features[] this app implements (interop map c.6); `extensions` is the tasks extension.
SERVED_FEATURES = ("server-discover", "mrtr", "cacheable-lists", "extensions")

# The revisions the mount can answer (facet validation refuses offering any other): the stateless
# 2026-07-28, and the handshake-era ones apps/mcp/handshake.py serves when offered.
SERVABLE_REVISIONS = ("2025-06-18", "2025-11-25", "2026-07-28")


class MCPConfig(AppConfig):
    name = "apps.mcp"
    label = "mcp"
    verbose_name = "MCP server mount"

    def ready(self) -> None:
        from apps.facets import surfaces
        from apps.facets.servable import register_servable_versions

        register_servable_versions("mcp", SERVABLE_REVISIONS)

        surfaces.register_surface(surfaces.MCP_STREAMABLE_HTTP)
        surfaces.register_surface(surfaces.MCP_STDIO)
        for feature in SERVED_FEATURES:
            surfaces.register_surface(surfaces.MCP_FEATURE_PREFIX + feature)

        from apps.core.request_limits import register_refusal_renderer
        from apps.mcp import client_nodes  # noqa: F401  (registers the sampling and roots node kinds)
        from apps.mcp.refusals import mcp_refusal

        register_refusal_renderer("/mcp", mcp_refusal)  # limits answer in MCP's wire, never the envelope

        from apps.core.door_request import door_routes_declare
        from apps.mcp.urls import door_urlpatterns

        door_routes_declare(door_urlpatterns)  # the mount: the door's, not Django's
