"""The MCP mount at the facet's default server path (`mcp.serverUrls[0]`), and its RFC 9728
Protected Resource Metadata (apps/mcp/authorization.py): the host's own document at the bare
well-known path, each mount's with its path inserted after it (RFC 9728 §3.1).

`door_urlpatterns` (the mount) is served by the door straight from ASGI (apps/doors/asgi.py;
handed to it in apps/mcp/apps.py), every method; Django's URLconf includes `urlpatterns` only."""

from django.urls import URLPattern, path

from apps.mcp.authorization import protected_resource_metadata
from apps.mcp.views import mcp_endpoint

door_urlpatterns: list[URLPattern] = [
    path("mcp", mcp_endpoint, name="mcp-endpoint"),
]

urlpatterns: list[URLPattern] = [
    path(".well-known/oauth-protected-resource", protected_resource_metadata, name="oauth-protected-resource"),
    path(
        ".well-known/oauth-protected-resource/<path:mount>",
        protected_resource_metadata,
        name="oauth-protected-resource-mount",
    ),
]
