"""The request a protocol door sees when it is served straight from ASGI, not by Django's handler.

The A2A and MCP views read a handful of `HttpRequest` attributes (method, path, headers, the
query string, the body, its content type). `DoorRequest` carries exactly those, built from the
ASGI scope and the body the door already read, so the same view code serves both routes: the
door's (apps/doors/asgi.py, production) and Django's (the test client). Both read and write the
same way (apps/core/async_db.py picks the connection); they differ only in how long the request's
thread context lives (`served_by_door`).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.http import QueryDict
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


def served_by_door(request: Any) -> bool:
    """Served by the door, whose request thread context (asgiref's ThreadSensitiveContext) lives
    until the answer, streamed or not, is sent; Django's handler may end it when the view returns."""
    return isinstance(request, DoorRequest)
