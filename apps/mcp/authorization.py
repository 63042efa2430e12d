"""MCP authorization: the mount as an OAuth 2.1 resource server.

- RFC 9728 Protected Resource Metadata at `/.well-known/oauth-protected-resource<mount>` for each
  MCP mount path, and at `/.well-known/oauth-protected-resource` for the host itself (the REST and
  A2A doors' resource, OPENWOP_PUBLIC_URL): `resource` is exactly the identifier the well-known
  path was formed from (RFC 9728 §3.3, identity.md §2.5), `authorization_servers` the enabled
  trusted issuers, `scopes_supported` every scope they require for that resource's method
  families (the mount: mcp:*; the host: a2a and rest). A host with no enabled issuer has no OAuth
  lane and serves neither document (its usual 404).
- The 401 challenge names the mount's document and the mount's scopes (apps/oauth/challenge.py builds
  the header: the MCP client's scope selection asks for them), and a method whose family the
  caller's token lacks scopes for is a 403 with the scope challenge; the JSON-RPC error carries the
  reason in `data`, as every refusal on the mount does.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.handlers.exception import response_for_exception
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.views.decorators.http import require_safe
from mcp_types.jsonrpc import INVALID_REQUEST

from apps.core.errors import Forbidden, Unauthenticated
from apps.mcp.errors import McpError
from apps.oauth.challenge import OAuthDoorState, bearer_challenge, insufficient_scope_challenge, oauth_door_state

PRM_MAX_AGE = 60
HOST_RESOURCE_NAME = "openwop-host"
MCP_RESOURCE_NAME = "openwop-host MCP server"

# The method families an issuer's `required_scopes` names (apps/oauth/models.py METHOD_FAMILIES).
_FAMILIES = frozenset({"tools", "resources", "prompts", "tasks"})


def method_family(method: str) -> str:
    """tools/* -> mcp:tools, resources/* -> mcp:resources, prompts/* -> mcp:prompts,
    tasks/* -> mcp:tasks, anything else (initialize, server/discover, completion/...) -> mcp:other."""
    prefix, slash, _ = method.partition("/")
    return f"mcp:{prefix}" if slash and prefix in _FAMILIES else "mcp:other"


def unauthenticated_error(exc: Unauthenticated, *, state: OAuthDoorState, presented: bool) -> McpError:
    """A refused credential on the mount: HTTP 401, the identity code as `data.reason`, and the
    RFC 9728 challenge while the host has an OAuth lane."""
    error = McpError(INVALID_REQUEST, exc.message, {"reason": exc.code}, http_status=401)
    error.headers.update(exc.headers)
    if state.enabled:
        error.headers["WWW-Authenticate"] = bearer_challenge(
            metadata_url=state.mcp_metadata_url, presented=presented, scopes=state.mcp_scopes
        )
    return error


def insufficient_scope_error(*, state: OAuthDoorState, method: str, scopes: tuple[str, ...]) -> McpError:
    """HTTP 403 with the scope challenge listing every scope the method's family requires."""
    error = McpError(
        INVALID_REQUEST,
        f"The access token lacks a scope {method!r} requires ({' '.join(scopes)}).",
        {"reason": Forbidden.code, "error": "insufficient_scope", "requiredScopes": list(scopes)},
        http_status=403,
    )
    error.headers["WWW-Authenticate"] = insufficient_scope_challenge(metadata_url=state.mcp_metadata_url, scopes=scopes)
    return error


def _mount_paths() -> list[str]:
    from apps.facets.services import facet_cached

    return [str(path) for path in (facet_cached(protocol="mcp").server_paths or ["/mcp"])]


def protected_resource_document(*, mount: str | None) -> dict[str, Any] | None:
    """The RFC 9728 document for an MCP mount path (`mount`, e.g. "/mcp") or for the host itself
    (None); None when there is no such mount or no enabled issuer."""
    state = oauth_door_state()
    if not state.enabled:
        return None
    base = str(settings.OPENWOP_PUBLIC_URL)
    if mount is None:
        resource, name, scopes = base, HOST_RESOURCE_NAME, state.host_scopes
    elif mount in _mount_paths():
        resource, name, scopes = base + mount, MCP_RESOURCE_NAME, state.mcp_scopes
    else:
        return None
    document: dict[str, Any] = {
        "resource": resource,
        "authorization_servers": list(state.issuers),
        "bearer_methods_supported": ["header"],
        "resource_name": name,
    }
    if scopes:
        document["scopes_supported"] = list(scopes)
    return document


@require_safe
def protected_resource_metadata(request: HttpRequest, mount: str | None = None) -> HttpResponseBase:
    """`GET /.well-known/oauth-protected-resource[/<mount>]`: public, briefly cacheable JSON."""
    document = protected_resource_document(mount=None if mount is None else "/" + mount)
    if document is None:
        # Django's own answer to an unmatched path (enveloped by the protocol middleware, as any 404).
        return response_for_exception(request, Http404())
    response = HttpResponse(json.dumps(document, separators=(",", ":")), content_type="application/json")
    response["Cache-Control"] = f"public, max-age={PRM_MAX_AGE}"
    response["Access-Control-Allow-Origin"] = "*"  # public metadata: browser-based MCP clients read it too
    return response
