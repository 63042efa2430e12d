"""In-process requests through the door production serves: `openwop_host.asgi.application`.

The protocol paths (A2A, MCP, the card) are served by apps/doors before Django's URLconf, so a test
that posts them with Django's test `Client` takes a path production never takes (issue 35 item 5).
`DoorClient` has the few methods of Django's test client the tests use (`get`, `post`, `generic`,
...) and sends each request to the ASGI application instead: the door answers its paths, Django's
ASGI handler the rest, exactly as under the server.

Each request runs the application with `async_to_sync` from the test's own thread. asgiref then sends
every thread-sensitive `sync_to_async` call of the request (the ORM, the door's and Django's alike)
back to this thread, whose connection holds a `db` test's open transaction, so the request sees the
test's uncommitted rows (and apps/core/async_db.py takes Django's connection for its statements, as
`statements_on_django_connection` says). The door's request context (asgiref's ThreadSensitiveContext)
then never gets a thread of its own, so its connection release at the end has nothing to release.
Django's handler closes an unusable connection at each request's start and end
(`close_old_connections`, which a test's open transaction would trip): like Django's own test
clients, `DoorClient` holds that receiver off for the request.

A streaming answer is read to its end. With `leave_open_streams=True` the client reads an event
stream's head and leaves (the door sees the client disconnect, as from a caller that goes away): a
stream that waits for something the test never does then cannot hang it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

from asgiref.sync import async_to_sync
from django.core.serializers.json import DjangoJSONEncoder
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.utils.datastructures import CaseInsensitiveMapping

HOST = "testserver"  # Django's test client's host; pytest-django adds it to ALLOWED_HOSTS
CLIENT_ADDRESS = "127.0.0.1"


class DoorResponse:
    """What the door (or Django's ASGI handler) sent, read the way tests read Django's responses."""

    def __init__(self, status_code: int, raw_headers: list[tuple[bytes, bytes]], content: bytes, left: bool) -> None:
        self.status_code = status_code
        self.raw_headers = raw_headers
        joined: dict[str, str] = {}
        for name, value in raw_headers:
            key, text = name.decode("latin-1"), value.decode("latin-1")
            joined[key] = f"{joined[key]}, {text}" if key in joined else text
        self.headers: CaseInsensitiveMapping[str] = CaseInsensitiveMapping(joined)
        self.content = content
        # An event stream the client left before its end: its body is only what came first.
        self.streaming = left

    @property
    def streaming_content(self) -> Iterator[bytes]:
        return iter([self.content])

    @property
    def text(self) -> str:
        return self.content.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.content)

    def __getitem__(self, header: str) -> str:
        return self.headers[header]

    def __contains__(self, header: str) -> bool:
        return header in self.headers

    def has_header(self, header: str) -> bool:
        return header in self.headers

    def get(self, header: str, alternate: str | None = None) -> str | None:
        return self.headers.get(header, alternate)

    def items(self) -> Any:
        return self.headers.items()

    def __repr__(self) -> str:
        return f"<DoorResponse {self.status_code} {self.headers.get('Content-Type', '')!r}>"


class DoorClient:
    """Django's test-client calls (the subset the tests make), sent to the ASGI application."""

    def __init__(self, *, leave_open_streams: bool = False, application: Any = None) -> None:
        """`application`: another ASGI app than the host's (one built after a test changed settings
        Django's handler reads once, at start-up: its middleware's)."""
        if application is None:
            from openwop_host.asgi import application

        self.application = application
        self.leave_open_streams = leave_open_streams

    def get(self, path: str, data: Mapping[str, Any] | None = None, *, headers: Mapping[str, str] | None = None,
            **extra: Any) -> DoorResponse:  # fmt: skip
        return self.generic("GET", path, headers=headers, query=data, **extra)

    def head(self, path: str, data: Mapping[str, Any] | None = None, *, headers: Mapping[str, str] | None = None,
             **extra: Any) -> DoorResponse:  # fmt: skip
        return self.generic("HEAD", path, headers=headers, query=data, **extra)

    def options(self, path: str, data: Any = "", content_type: str = "application/octet-stream", *,
                headers: Mapping[str, str] | None = None, **extra: Any) -> DoorResponse:  # fmt: skip
        return self.generic("OPTIONS", path, data, content_type, headers=headers, **extra)

    def post(self, path: str, data: Any = None, content_type: str | None = None, *,
             headers: Mapping[str, str] | None = None, **extra: Any) -> DoorResponse:  # fmt: skip
        if data is None and content_type is not None and _is_json(content_type):
            data = {}  # Django's test client posts `{}` then
        return self.generic("POST", path, data, content_type, headers=headers, **extra)

    def put(self, path: str, data: Any = "", content_type: str = "application/octet-stream", *,
            headers: Mapping[str, str] | None = None, **extra: Any) -> DoorResponse:  # fmt: skip
        return self.generic("PUT", path, data, content_type, headers=headers, **extra)

    def patch(self, path: str, data: Any = "", content_type: str = "application/octet-stream", *,
              headers: Mapping[str, str] | None = None, **extra: Any) -> DoorResponse:  # fmt: skip
        return self.generic("PATCH", path, data, content_type, headers=headers, **extra)

    def delete(self, path: str, data: Any = "", content_type: str = "application/octet-stream", *,
               headers: Mapping[str, str] | None = None, **extra: Any) -> DoorResponse:  # fmt: skip
        return self.generic("DELETE", path, data, content_type, headers=headers, **extra)

    def generic(
        self,
        method: str,
        path: str,
        data: Any = "",
        content_type: str | None = "application/octet-stream",
        *,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, Any] | None = None,
        **extra: Any,
    ) -> DoorResponse:
        """`extra` takes Django's META spellings (HTTP_X_NAME, CONTENT_TYPE, REMOTE_ADDR)."""
        body = _encoded(data, content_type)
        split = urlsplit(path)
        query_string = urlencode(query, doseq=True) if query else split.query
        sent: list[tuple[bytes, bytes]] = [(b"host", HOST.encode())]
        client = extra.pop("REMOTE_ADDR", CLIENT_ADDRESS)
        if body:  # as Django's test client: no body, no Content-Type or Content-Length
            sent.append((b"content-length", str(len(body)).encode()))
            if content_type is not None:
                sent.append((b"content-type", content_type.encode("latin-1")))
        named = dict(headers or {})
        for key, value in extra.items():
            if key.startswith("HTTP_"):
                named[key.removeprefix("HTTP_").replace("_", "-").title()] = value
            elif key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                named[key.replace("_", "-").title()] = value
            else:
                raise TypeError(f"DoorClient: {key!r} has no ASGI equivalent here")
        for name, value in named.items():
            lowered = name.lower().encode("latin-1")
            if lowered in (b"host", b"content-type", b"content-length"):
                sent = [(n, v) for n, v in sent if n != lowered]
            sent.append((lowered, str(value).encode("latin-1")))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method.upper(),
            "scheme": "http",
            "path": unquote(split.path),
            "raw_path": split.path.encode("utf-8", "surrogateescape"),
            "query_string": query_string.encode("latin-1", "replace"),
            "root_path": "",
            "headers": sent,
            "client": (client, 50000),
            "server": (HOST, 80),
        }
        request_started.disconnect(close_old_connections)
        request_finished.disconnect(close_old_connections)
        try:
            return async_to_sync(self._exchange)(scope, body)
        finally:
            request_started.connect(close_old_connections)
            request_finished.connect(close_old_connections)

    async def _exchange(self, scope: dict[str, Any], body: bytes) -> DoorResponse:
        """One request and its whole answer; the client leaves once the answer ended (or, with
        `leave_open_streams`, once an event stream has begun), as a server reports it."""
        gone = asyncio.Event()
        request_sent = False
        status = 0
        raw_headers: list[tuple[bytes, bytes]] = []
        parts: list[bytes] = []
        left = False

        async def receive() -> dict[str, Any]:
            nonlocal request_sent
            if not request_sent:
                request_sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, raw_headers, left
            if message["type"] == "http.response.start":
                status, raw_headers = message["status"], list(message.get("headers", ()))
                if self.leave_open_streams and _is_event_stream(raw_headers):
                    left = True
                    gone.set()
            elif message["type"] == "http.response.body":
                if scope["method"] != "HEAD":
                    parts.append(message.get("body", b""))
                if not message.get("more_body", False):
                    gone.set()

        await self.application(scope, receive, send)
        if not status:
            raise AssertionError(f"the application sent no answer to {scope['method']} {scope['path']}")
        return DoorResponse(status, raw_headers, b"".join(parts), left)


def _is_event_stream(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name == b"content-type" and value.startswith(b"text/event-stream") for name, value in headers)


def _is_json(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower().endswith("json")


def _encoded(data: Any, content_type: str | None) -> bytes:
    """The request body from what a test passes as `data`, as Django's test client encodes it."""
    if data is None:
        return b""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    if content_type is not None and _is_json(content_type):
        return json.dumps(data, cls=DjangoJSONEncoder).encode("utf-8")
    raise TypeError(f"DoorClient: encode {type(data).__name__} data yourself (content type {content_type!r})")
