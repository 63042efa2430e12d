"""The request a protocol door sees, served straight from ASGI (apps/doors/asgi.py), and the routes
the doors serve.

The A2A and MCP views read a handful of `HttpRequest` attributes (method, path, headers, the
query string, the body, its content type). `DoorRequest` carries exactly those, built from the
ASGI scope and the body the door already read: the door is the only way to these views (Django's
URLconf does not route them; the tests reach them through the door too, tests/door_client.py).

The routes are declared once, in the protocol apps' urls.py (`door_urlpatterns`), and handed in
here by those apps at start-up (their AppConfig.ready(), as a higher floor hands a lower one what
it calls): the door routes them, and whatever checks what a path on this host would answer (the
card path's validation, apps/facets/validation.py) resolves them here, before Django's URLconf.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from typing import Any

from django.http import QueryDict
from django.urls import Resolver404, ResolverMatch, URLPattern, URLResolver
from django.urls.resolvers import RegexPattern
from django.utils.datastructures import CaseInsensitiveMapping
from django.utils.http import parse_header_parameters


class DoorRequest:
    def __init__(self, scope: dict[str, Any], body: bytes) -> None:
        self.scope = scope
        self.method: str = scope["method"]
        self.path: str = scope.get("root_path", "") + scope["path"]
        self.path_info: str = scope["path"]
        self.body = body
        raw: dict[str, str] = {}
        for name, value in scope.get("headers", ()):
            key = name.decode("latin-1")
            text = value.decode("latin-1")
            # Repeated headers join with ", " (RFC 9110 §5.3), as Django's ASGIRequest does.
            raw[key] = f"{raw[key]}, {text}" if key in raw else text
        self._raw_headers = raw
        self.headers = CaseInsensitiveMapping(raw)

    @cached_property
    def GET(self) -> QueryDict:
        return QueryDict(self.scope.get("query_string", b"").decode("latin-1"))

    @cached_property
    def content_type(self) -> str:
        content_type, _ = parse_header_parameters(self.headers.get("Content-Type") or "")
        return content_type

    @cached_property
    def META(self) -> dict[str, str]:
        """The CGI-style view of the headers, for the few readers that use it (request limits)."""
        meta = {
            "REQUEST_METHOD": self.method,
            "PATH_INFO": self.path_info,
            "QUERY_STRING": self.scope.get("query_string", b"").decode("latin-1"),
        }
        for name, value in self._raw_headers.items():
            key = name.upper().replace("-", "_")
            if key in ("CONTENT_LENGTH", "CONTENT_TYPE"):
                meta[key] = value
            else:
                meta[f"HTTP_{key}"] = value
        return meta

    def get_full_path(self) -> str:
        query = self.scope.get("query_string", b"")
        return self.path + ("?" + query.decode("latin-1") if query else "")


_door_routes: list[URLPattern] = []


def door_routes_declare(patterns: Iterable[URLPattern]) -> None:
    """Routes a door serves before Django's URLconf, handed in by the app that declares them."""
    _door_routes.extend(pattern for pattern in patterns if pattern not in _door_routes)


def door_routes() -> list[URLPattern]:
    """Every route the doors serve (every method), in the order the apps declared them."""
    return list(_door_routes)


def door_route_match(path: str) -> ResolverMatch | None:
    """The door route that answers `path` (a leading "/"), else None: Django's URLconf decides."""
    try:
        return URLResolver(RegexPattern(r"^/"), door_routes()).resolve(path)
    except Resolver404:
        return None
