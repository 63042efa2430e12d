"""A deadline on reading a request's body, for every path the host serves over HTTP.

A client that sends its headers and then drips the body (10 bytes every 2 s) held its connection,
and the request's place in the server, for as long as it liked: the ASGI server has a keep-alive
timeout between requests but none while a body arrives. `body_read_deadline(app)` wraps the whole
HTTP application: the body must be complete within OPENWOP_BODY_READ_TIMEOUT_SECONDS of the
request reaching the application; past that the request is refused in its door's own wire (408:
the REST envelope `openwop-host.request_timeout`; A2A's and MCP's errors through their registered
refusal renderers, apps/core/request_limits.py; a short page elsewhere), the response says
`Connection: close`, and the application sees the client leave (`http.disconnect`), as if it had.

Headers dripped before the application is called are the balancer's to bound (haproxy `timeout
http-request`: docs/operators/running-locally.md §Slow clients); uvicorn has no header deadline.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from apps.core.door_request import DoorRequest

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TIMEOUT_PAGE = (
    b"<!doctype html><title>Request Timeout</title><h1>Request Timeout</h1>"
    b"<p>The request body did not arrive in time.</p>"
)


def body_read_timeout_seconds() -> float:
    return float(getattr(settings, "OPENWOP_BODY_READ_TIMEOUT_SECONDS", 30.0))


def _refusal_messages(scope: Scope, timeout: float) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The door's own 408 for this path: status, headers, body."""
    from apps.core.request_limits import Refusal, renderer_for

    path = scope.get("root_path", "") + scope["path"]
    render = renderer_for(path)
    message = f"The request body did not arrive within {timeout:g} s."
    if render is None:
        return 408, [(b"content-type", b"text/html; charset=utf-8")], TIMEOUT_PAGE
    response = render(DoorRequest(scope, b""), Refusal("body_timeout", message, int(timeout)))  # type: ignore[arg-type]
    headers = [(name.lower().encode("latin-1"), str(value).encode("latin-1")) for name, value in response.items()]
    body = bytes(getattr(response, "content", b""))
    return response.status_code, headers, body


def body_read_deadline(app: ASGIApp) -> ASGIApp:
    """`app`, with the body of every HTTP request due within the deadline (see above)."""

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        timeout = body_read_timeout_seconds()
        if scope["type"] != "http" or timeout <= 0:
            await app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + timeout
        state = {"body_done": False, "refused": False, "started": False}

        async def receive_until_due() -> Message:
            if state["body_done"] or state["refused"]:
                return await receive()
            try:
                async with asyncio.timeout_at(due):
                    message = await receive()
            except TimeoutError:
                if not state["started"]:
                    await _refuse()
                state["refused"] = True
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                state["body_done"] = True
            return message

        async def _refuse() -> None:
            status, headers, body = _refusal_messages(scope, timeout)
            headers = [*(h for h in headers if h[0] not in (b"content-length", b"connection")),
                       (b"content-length", str(len(body)).encode()), (b"connection", b"close")]  # fmt: skip
            logger.info("request body not read within %g s: %s %s answered %d", timeout, scope.get("method"),
                        json.dumps(scope["path"])[:200], status)  # fmt: skip
            state["started"] = True
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        async def send_unless_refused(message: Message) -> None:
            if state["refused"]:
                return  # the 408 went out; what the application says after the "disconnect" goes nowhere
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        await app(scope, receive_until_due, send_unless_refused)

    return application
