"""The front door (issue 53 item 3): `/`, an HTML page linking what a newcomer looks for (the
console, the admin, the docs, discovery), and `/host/openwop-host/api-docs`, the REST wire's
operations rendered on the server from the very schema `/openapi.json` serves (drf-spectacular's
generator and hooks: a route that is off is in neither). No script, no style and no font is
fetched from elsewhere: the pages use the console's own stylesheet, and every string is escaped by
the template engine."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from drf_spectacular.generators import SchemaGenerator

from apps.a2a.signing import JWKS_PATH

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

# The discovery documents a client starts from, with what each says.
DISCOVERY = (
    ("/.well-known/agent-card.json", "the host's public A2A agent card (at its default path)"),
    ("/.well-known/openwop", "OpenWOP discovery: facets, profiles, capabilities, limits"),
    (JWKS_PATH, "the keys that sign the agent cards"),
    ("/.well-known/oauth-protected-resource", "OAuth protected resource metadata (RFC 9728), with trusted issuers"),
    ("/openapi.json", "the OpenAPI 3 schema of the REST wire"),
)


def front_door(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "front/index.html",
        {"public_url": settings.OPENWOP_PUBLIC_URL, "discovery": DISCOVERY, "version": _version()},
    )


def api_docs(request: HttpRequest) -> HttpResponse:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    context = {"info": schema.get("info", {}), "paths": _operations(schema), "section": "api"}
    return render(request, "front/api_docs.html", context)


def _operations(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Each path of the schema with its operations, in the schema's order."""
    rows = []
    for path, item in (schema.get("paths") or {}).items():
        operations = []
        for method in HTTP_METHODS:
            operation = item.get(method)
            if not isinstance(operation, dict):
                continue
            parameters = [p for p in operation.get("parameters", []) if isinstance(p, dict)]
            operations.append(
                {
                    "method": method.upper(),
                    "id": operation.get("operationId", ""),
                    "summary": operation.get("summary") or operation.get("description", ""),
                    "parameters": [f"{p.get('name', '')} ({p.get('in', '')})" for p in parameters],
                    "has_body": "requestBody" in operation,
                    "responses": sorted(str(code) for code in (operation.get("responses") or {})),
                    "tags": operation.get("tags", []),
                }
            )
        if operations:
            rows.append({"path": path, "operations": operations})
    return rows


def _version() -> str:
    from openwop_host import __version__

    return __version__
