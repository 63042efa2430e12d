"""Reads for the OAuth lanes: the enabled trusted issuers and the audiences of the host's doors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from django.conf import settings
from django.db.models import QuerySet

from apps.oauth.models import TrustedIssuer

Door = Literal["mcp", "a2a", "rest"]
DOORS: tuple[str, ...] = ("mcp", "a2a", "rest")
DEFAULT_MCP_PATH = "/mcp"


def _enabled_issuers() -> QuerySet[TrustedIssuer]:
    """The enabled issuers, with their tenant and allowed tenants (a plain query: sync only)."""
    return TrustedIssuer.objects.filter(enabled=True).select_related("tenant").prefetch_related("allowed_tenants")


def trusted_issuers() -> list[TrustedIssuer]:
    return list(_enabled_issuers())


def trusted_issuer_by_iss(iss: str) -> TrustedIssuer | None:
    """The enabled issuer whose `issuer` is exactly `iss`, or None."""
    return _enabled_issuers().filter(issuer=iss).first()


# Where the MCP mount is: the facets app (a floor above this one) registers its reader in its ready().
_mcp_paths: list[Callable[[], list[str]]] = []


def on_mcp_paths(source: Callable[[], list[str]]) -> None:
    _mcp_paths[:] = [source]


def mcp_server_path() -> str:
    """The first MCP mount path the facet advertises (the RFC 8707 resource MCP clients ask for)."""
    paths = _mcp_paths[0]() if _mcp_paths else []
    return str(paths[0]) if paths else DEFAULT_MCP_PATH


def door_audience(door: str) -> str:
    """The default `aud` a token must carry at `door`: the MCP server URL for "mcp"
    (e.g. http://host/mcp), the host's public URL for "a2a" and "rest"."""
    if door == "mcp":
        return f"{settings.OPENWOP_PUBLIC_URL}{mcp_server_path()}"
    return str(settings.OPENWOP_PUBLIC_URL)


def door_audiences() -> frozenset[str]:
    """Every door's default audience (a call that names no door accepts any of them)."""
    return frozenset(door_audience(door) for door in DOORS)


def protected_resource_metadata_url(door: str = "mcp") -> str:
    """RFC 9728 §3.1: the well-known path inserted before the resource's path, e.g.
    http://host/.well-known/oauth-protected-resource/mcp."""
    path = mcp_server_path() if door == "mcp" else ""
    return f"{settings.OPENWOP_PUBLIC_URL}/.well-known/oauth-protected-resource{path}"
