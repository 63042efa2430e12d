"""The protocol doors served straight from ASGI, in front of Django (DESIGN.md §The hot path).

Django's request handler alone costs more per request than a whole reference-server exchange
(issue 13's floor table), so the A2A interfaces, the MCP mount and the public agent card do not go
through it. `doors_application(django_app)` routes those paths to their views (apps/a2a/views.py,
apps/mcp/views.py; the routes are declared once, in the apps' urls.py, and Django's URLconf does
not have them), handing them a `DoorRequest`, and everything else (REST, admin, console, host
events, static files) to Django unchanged.

What Django's stack did for these paths is done here, once and cheaply:
- Host validation and the HTTPS redirect: a request Django would refuse or redirect is handed to
  Django whole, so its answer is Django's, byte for byte.
- Request limits (body size, JSON depth, per-key and per-tenant rate, stream slots): the same
  decision RequestLimitsMiddleware takes, rendered by the door's registered refusal renderer; the
  rates are counted from the headers before the body is read, so an over-budget caller costs
  neither a body read nor authentication.
- The security headers SecurityMiddleware and XFrameOptionsMiddleware add.
- A client that disconnects cancels the view (as Django's handler does: tools/call cancels its
  run on it); the server's disconnect after a completed response does not. A stream slot is given
  back however a stream ends, and a stream re-checks its credential while it lasts
  (apps/core/stream_lease.py).
- Sync work a view does (`sync_to_async`) runs on a thread of the request's own (asgiref's
  ThreadSensitiveContext, as Django's handler gives each request), whose database connection
  goes back to the pool when the request ends. The runs' reads and the negotiation record use
  the event loop's own pool instead (apps/core/async_db.py) and need no thread at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

from asgiref.sync import SyncToAsync, ThreadSensitiveContext
from django.conf import settings
from django.core.signals import setting_changed
from django.db import DataError
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.http.request import split_domain_port, validate_host
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import Resolver404, URLResolver
from django.urls.resolvers import RegexPattern

from apps.a2a.errors import invalid_input, jsonrpc_error_body, rest_error_body
from apps.core import metrics, tracing
from apps.core.api_errors import data_error_refusal
from apps.core.db_threads import release_db_connection
from apps.core.door_request import DoorRequest, door_routes
from apps.core.errors import InternalError
from apps.core.fair_turns import reset as fair_turns_reset
from apps.core.fair_turns import turn_for
from apps.core.fanout import FanOut
from apps.core.middleware import envelope_contract_close, envelope_contract_open
from apps.core.overload import is_overload
from apps.core.protocol import wants_envelope
from apps.core.rate_limits import LimitSettings
from apps.core.request_limits import (
    Refusal,
    admit_async,
    is_stream_request,
    overload_refusal,
    rate_refusal_async,
    refusal_pause,
    renderer_for,
    request_id_of,
)
from apps.core.responses import envelope_response
from apps.core.stream_lease import REVOKED_COMMENT, Allowed, served_while_allowed, stream_slot_held
from apps.mcp.errors import mcp_error_from_data_error
from apps.runs import urls as runs_urls
from apps.runs.views import run_events_stream
from apps.tenants.stream_credential import credential_check, door_of

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
View = Callable[..., Awaitable[HttpResponseBase]]

CARD_PATH = "/.well-known/agent-card.json"

# The routes the door claims: the protocol apps' (declared once, in their urls.py, and handed in at
# start-up: apps.core.door_request.door_routes), every method, which Django's URLconf does not have;
# and a run's event stream, GET only (each event is a write to every subscriber, so here the run's
# feed writes them from one loop: apps.core.fanout.FanOut.send_to), whose route Django keeps for
# the paths the door passes on.
RUN_EVENTS = "run-events"


@functools.cache
def _resolver() -> URLResolver:
    run_events = [p for p in runs_urls.urlpatterns if p.name == RUN_EVENTS]
    return URLResolver(RegexPattern(r"^/"), [*door_routes(), *run_events])


@functools.lru_cache(maxsize=4096)
def _resolved(path: str) -> tuple[View, str, dict[str, str]] | None:
    try:
        match = _resolver().resolve(path)
    except Resolver404:
        return None
    return match.func, str(match.url_name), match.kwargs


def _route(path: str, method: str) -> tuple[View, dict[str, str]] | None:
    """The view (and its URL kwargs) for a path a door claims, else None (Django's)."""
    resolved = _resolved(path)
    if resolved is None:
        return None
    view, name, kwargs = resolved
    if name == RUN_EVENTS:
        return (_run_events, kwargs) if method == "GET" else None
    return view, kwargs


async def _run_events(request: DoorRequest, run_ref: str) -> HttpResponseBase:
    """The run's event stream with what ProtocolEnvelopeMiddleware does around it under Django."""
    early, contract = envelope_contract_open(request)  # type: ignore[arg-type]
    if early is not None:
        return early
    response = await run_events_stream(request, run_ref)  # type: ignore[arg-type]
    return envelope_contract_close(request, response, contract)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# What Django's middleware would have said before the view


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return cast(bytes, value).decode("latin-1")
    return None


def _is_secure(scope: Scope) -> bool:
    """HttpRequest.is_secure(): the proxy's header when the operator trusts it, else the scheme."""
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        header, secure_value = proxy
        name = header.removeprefix("HTTP_").lower().replace("_", "-").encode("latin-1")
        value = _header(scope, name)
        if value is not None:
            return value.split(",", 1)[0].strip() == secure_value
    return scope.get("scheme") == "https"


_host_checked: dict[str, bool] = {}


def _host_allowed(scope: Scope) -> bool:
    """HttpRequest.get_host()'s check against ALLOWED_HOSTS (memoised: a handful of hosts)."""
    host = None
    if getattr(settings, "USE_X_FORWARDED_HOST", False):
        host = _header(scope, b"x-forwarded-host")
    if host is None:
        host = _header(scope, b"host")
    if host is None:
        server = scope.get("server") or ("", 80)
        host = f"{server[0]}:{server[1]}"
    allowed = _host_checked.get(host)
    if allowed is None:
        allowed_hosts = list(settings.ALLOWED_HOSTS)
        if settings.DEBUG and not allowed_hosts:
            allowed_hosts = [".localhost", "127.0.0.1", "[::1]"]
        domain, _port = split_domain_port(host)
        allowed = bool(domain) and validate_host(domain, allowed_hosts)
        if len(_host_checked) < 1024:  # a flood of forged Host headers must not grow it forever
            _host_checked[host] = allowed
    return allowed


def _django_would_answer(scope: Scope) -> bool:
    """A request Django refuses (foreign Host) or redirects (HTTPS) before any view."""
    if not _host_allowed(scope):
        return True
    return bool(getattr(settings, "SECURE_SSL_REDIRECT", False)) and not _is_secure(scope)


_headers_by_security: dict[bool, list[tuple[bytes, bytes]]] = {}


@receiver(setting_changed)
def _settings_changed(**kwargs: object) -> None:
    """Tests override settings; what the door derived from them is derived again."""
    _headers_by_security.clear()
    _host_checked.clear()
    fair_turns_reset()


def _security_headers(secure: bool) -> list[tuple[bytes, bytes]]:
    """What SecurityMiddleware and XFrameOptionsMiddleware add to every response they pass: Django's
    own two, run once on a blank response, so the door and they can never disagree (and settings are
    read once, not a dozen times a request)."""
    headers = _headers_by_security.get(secure)
    if headers is None:
        probe = _SecurityProbe(secure)
        response = HttpResponse()
        before = set(response.headers)
        SecurityMiddleware(lambda _: response).process_response(probe, response)
        XFrameOptionsMiddleware(lambda _: response).process_response(probe, response)
        headers = _headers_by_security[secure] = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in response.headers.items()
            if name not in before
        ]
    return headers


class _SecurityProbe(HttpRequest):
    """A request that is secure (or not) as the door decided (`_is_secure`)."""

    def __init__(self, secure: bool) -> None:
        super().__init__()
        self._secure = secure

    def is_secure(self) -> bool:
        return self._secure


# ---------------------------------------------------------------------------------------------
# Reading the request, sending the response


class _Disconnected(Exception):
    pass


async def _read_body(receive: Receive, limit: int) -> bytes:
    """The whole body, or at most `limit` + 1 bytes of it (the limits check refuses it then)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected()
        chunk = message.get("body", b"")
        if chunk and (limit <= 0 or size <= limit):
            chunks.append(chunk)
            size += len(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _response_headers(response: HttpResponseBase, extra: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    headers = [(name.lower().encode("latin-1"), str(value).encode("latin-1")) for name, value in response.items()]
    present = {name for name, _ in headers}
    headers.extend((name, value) for name, value in extra if name not in present)
    for cookie in response.cookies.values():
        headers.append((b"set-cookie", cookie.output(header="").strip().encode("latin-1")))
    return headers


async def _send_response(
    response: HttpResponseBase, send: Send, extra: list[tuple[bytes, bytes]], allowed: Allowed | None = None
) -> None:
    """The response; a stream is re-checked with `allowed` while it lasts (apps.core.stream_lease)
    and ended cleanly the first time its credential no longer holds."""
    headers = _response_headers(response, extra)
    if not response.streaming:
        content = cast(Any, response).content
        if not response.has_header("Content-Length"):
            headers.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": content})
        return
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    stream = cast(StreamingHttpResponse, response)
    if allowed is None:
        await _send_stream(stream, send)
    elif await served_while_allowed(_send_stream(stream, send), allowed):
        await send({"type": "http.response.body", "body": REVOKED_COMMENT, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _send_stream(stream: StreamingHttpResponse, send: Send) -> None:
    """A streaming response's body, without its end (the caller ends the response)."""
    fan_out = getattr(stream, "fan_out", None)
    if fan_out is not None:  # a run's event stream: its feed writes to `send` itself
        await cast(FanOut, fan_out).send_to(send)
    elif stream.is_async:
        content = cast(AsyncIterator[bytes], stream.streaming_content)
        try:
            async for part in content:
                await send({"type": "http.response.body", "body": bytes(part), "more_body": True})
        finally:
            aclose = getattr(content, "aclose", None)
            if aclose is not None:
                await aclose()
    else:
        for part in stream.streaming_content:  # type: ignore[union-attr]
            await send({"type": "http.response.body", "body": bytes(part), "more_body": True})


# ---------------------------------------------------------------------------------------------
# The door


class _Observed:
    """What the door answered (status, the body's first bytes), for the request metrics."""

    __slots__ = ("complete", "head", "send", "sent", "status")

    def __init__(self, send: Send) -> None:
        self.status = 499  # the client left before any answer
        self.head = b""
        self.send = send
        self.sent = 0  # body bytes sent (what the request's turn is charged: apps.core.fair_turns)
        self.complete = False  # the response's last body message was sent

    async def __call__(self, message: Any) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        else:
            body = message.get("body", b"")
            self.head = self.head or body[:200]
            self.sent += len(body)
            self.complete = not message.get("more_body", False)
        await self.send(message)


def _operation(request: DoorRequest, view: View, kwargs: dict[str, str]) -> tuple[str, str]:
    """(door, operation) of a door request, from bounded sets (apps.core.metrics)."""
    path = request.path
    if path == "/mcp":
        method = request.method or "POST"
        return "mcp", metrics.bounded(_rpc_method(request) if method == "POST" else method, metrics.MCP_OPERATIONS)
    if view is _run_events:
        return "rest", "GET runs/<runref:run_ref>/events"
    if path == CARD_PATH:
        return "a2a", "GetAgentCard"
    if "route" in kwargs:
        # The HTTP+JSON view names the operation it routed to (a2a.views.rest_endpoint): routed once.
        handler = getattr(request, "_openwop_rest_operation", None)
        return "a2a", f"rest:{handler}" if isinstance(handler, str) else "other"
    return "a2a", metrics.bounded(_rpc_method(request), metrics.A2A_OPERATIONS)


def _rpc_method(request: DoorRequest) -> str:
    """The JSON-RPC method of the body the view parsed ("" when none)."""
    body = getattr(request, "_openwop_json", None)
    name = body.get("method") if isinstance(body, dict) else None
    return name if isinstance(name, str) else ""


async def _serve(scope: Scope, receive: Receive, send: Send, view: View, kwargs: dict[str, str]) -> None:
    started = time.perf_counter()
    observed = _Observed(send)
    send = observed
    limit = int(getattr(settings, "OPENWOP_MAX_BODY_BYTES", 0))
    # Over a request budget (the key's, its tenant's): refused from the headers alone, before the
    # body is read and before authentication (issue 49 item 3). Only a small JSON-RPC body is still
    # read, for the id its error must echo.
    early = None
    if renderer_for(scope["path"]) is not None:
        early = await rate_refusal_async(_header(scope, b"authorization"), LimitSettings.current())
        if early is not None:
            await refusal_pause(early)  # a flood on few connections sends few requests
    try:
        body = await _read_body(receive, limit) if early is None or _id_worth_reading(scope) else b""
    except _Disconnected:
        return
    request = DoorRequest(scope, body)
    token = metrics.request_begun()
    with tracing.span("openwop.door", traceparent=_header(scope, b"traceparent")) as current:
        try:
            await _serve_request(request, scope, receive, send, view, kwargs, early)
        finally:
            door, operation = _operation(request, view, kwargs)
            outcome = metrics.outcome_of(observed.status, observed.head)
            metrics.request_observed(door, operation, outcome, started)
            metrics.reset_caller(token)
            if current is not None:
                current.update_name(f"{door} {operation}")
                current.set_attributes({
                    "openwop.door": door, "openwop.operation": operation, "openwop.outcome": outcome,
                    "http.response.status_code": observed.status,
                })  # fmt: skip


# A refused JSON-RPC request's body is read for its id only up to this size (declared length).
REFUSAL_ID_READ_BYTES = 16 * 1024


def _id_worth_reading(scope: Scope) -> bool:
    """A JSON-RPC door's small body, whose id the refusal echoes (an MCP client matches on it)."""
    if scope["path"] != "/mcp" and scope["path"].rstrip("/") != "/a2a/jsonrpc":
        return False
    declared = (_header(scope, b"content-length") or "").strip()
    return declared.isascii() and declared.isdigit() and len(declared) < 9 and int(declared) <= REFUSAL_ID_READ_BYTES


async def _serve_request(
    request: DoorRequest,
    scope: Scope,
    receive: Receive,
    send: Send,
    view: View,
    kwargs: dict[str, str],
    early: Refusal | None = None,
) -> None:
    extra = _security_headers(_is_secure(scope))
    render = renderer_for(request.path)

    async with ThreadSensitiveContext() as context:
        try:
            if render is None:
                # The card (the one path the limits leave alone): answered from memory, nothing to
                # cancel on a disconnect, so no watcher beside it.
                await _respond(request, view, kwargs, send, extra)
                return
            if early is not None:  # refused before the body was read (`_serve`)
                refusal = dataclasses.replace(early, request_id=request_id_of(request))  # type: ignore[arg-type]
                await _send_response(render(request, refusal), send, extra)  # type: ignore[arg-type]
                return
            admission = await admit_async(request, rate_checked=True)  # type: ignore[arg-type]
            if admission.refusal is not None:
                await _send_response(render(request, admission.refusal), send, extra)  # type: ignore[arg-type]
                return
            # The slot taken at admission goes back however the answer ends (apps.core.stream_lease).
            async with stream_slot_held(admission.held_slot):
                # A stream's slot is its budget and it takes no turn; every other answer waits for
                # its tenant's turn in this process (apps.core.fair_turns).
                streams = admission.held_slot is not None or is_stream_request(request)  # type: ignore[arg-type]
                async with turn_for(request.headers.get("Authorization"), stream=streams) as turn:
                    await _respond_until_disconnect(_respond(request, view, kwargs, send, extra), receive, send)
                    if turn is not None and isinstance(send, _Observed):
                        turn.answered = send.sent
        finally:
            if context in SyncToAsync.context_to_thread_executor:
                await release_db_connection()  # the request's thread did database work


async def _respond_until_disconnect(respond: Awaitable[None], receive: Receive, send: Send) -> None:
    """Answer in this task; a client that leaves first cancels it, so the view sees CancelledError,
    as under Django's handler (tools/call cancels its run on it). One watcher task, no wait set."""
    current = asyncio.current_task()
    assert current is not None
    left = finished = False

    async def watch() -> None:
        nonlocal left
        while (await receive())["type"] != "http.disconnect":
            pass
        # A server reports the end of a completed response as a disconnect too: nobody left then.
        if not finished and not (isinstance(send, _Observed) and send.complete):
            left = True
            current.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        await respond
    except asyncio.CancelledError:
        if not left:
            raise  # cancelled from outside (the server shutting down): not ours to swallow
        current.uncancel()
    finally:
        finished = True  # no await since `respond` ended: the watcher has not run in between
        watcher.cancel()


async def _respond(
    request: DoorRequest, view: View, kwargs: dict[str, str], send: Send, extra: list[tuple[bytes, bytes]]
) -> None:
    try:
        response = await view(request, **kwargs)
    except Exception as exc:  # not a CancelledError (a BaseException): a cancel goes on up
        response = _failure(request, exc)
    allowed = None
    authorization = request.headers.get("Authorization")
    if response.streaming and authorization:
        # Authorized once when it opened; re-checked while it lasts (apps.core.stream_lease).
        allowed = credential_check(authorization, door=door_of(request.path))
    with contextlib.suppress(OSError):
        await _send_response(response, send, extra, allowed)


def _failure(request: DoorRequest, exc: Exception) -> HttpResponseBase:
    """What a view raised instead of answering: a saturated host is the door's 503 (as
    RequestLimitsMiddleware.process_exception renders it), anything else its internal error."""
    render = renderer_for(request.path)
    if render is not None and is_overload(exc):
        logger.warning("overloaded: %s %s answered 503 (%s)", request.method, request.path, type(exc).__name__)
        return render(request, overload_refusal(request_id_of(request)))  # type: ignore[arg-type]
    if isinstance(exc, DataError):
        return _data_error_answer(request, exc)
    logger.exception("door: unhandled error on %s %s", request.method, request.path)
    # The views answer their own errors; this is the last resort, still in the binding's wire.
    if request.path == "/mcp" or request.path.rstrip("/") == "/a2a/jsonrpc":
        body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": "Internal error"}}
        return JsonResponse(body, status=500)
    if wants_envelope(request.path):  # the REST wire (a run's event stream)
        return envelope_response(InternalError())
    return JsonResponse({"error": {"code": 500, "status": "INTERNAL", "message": "Internal error"}}, status=500)


def _data_error_answer(request: DoorRequest, exc: DataError) -> HttpResponseBase:
    """A caller's value the database refused, which the view did not map: the binding's invalid
    params (the request id kept), as the views answer it."""
    refusal = data_error_refusal(exc)
    if request.path == "/mcp":
        error = mcp_error_from_data_error(exc)
        body = {"jsonrpc": "2.0", "id": request_id_of(request), "error": error.error_object()}  # type: ignore[arg-type]
        return JsonResponse(body, status=error.http_status)
    if request.path.rstrip("/") == "/a2a/jsonrpc":
        return JsonResponse(jsonrpc_error_body(invalid_input(refusal), request_id_of(request)))  # type: ignore[arg-type]
    if wants_envelope(request.path):
        return envelope_response(refusal)
    status, body = rest_error_body(invalid_input(refusal))
    return JsonResponse(body, status=status)


def doors_application(django_app: ASGIApp) -> ASGIApp:
    """ASGI: the doors' paths to their views, everything else to Django."""

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            routed = _route(scope["path"], scope["method"])
            if routed is not None and not _django_would_answer(scope):
                await _serve(scope, receive, send, routed[0], routed[1])
                return
        await django_app(scope, receive, send)

    return application
