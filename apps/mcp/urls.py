"""The MCP mount at the facet's default server path (`mcp.serverUrls[0]`)."""

from django.urls import URLPattern, path

from apps.mcp.views import mcp_endpoint

urlpatterns: list[URLPattern] = [
    path("mcp", mcp_endpoint, name="mcp-endpoint"),
]
