"""The streamable HTTP mount, stateless 2026-07-28 (POST only, one JSON response per request).

Order of refusals: method (405) -> Origin (403, DNS rebinding) -> JSON (-32700/-32600) -> bearer
credential (401, with the RFC 9728 challenge while an OAuth lane exists) -> the access token's
scopes for the method's family (403 insufficient_scope; apps/mcp/authorization.py) -> the ladder
and negotiation (dispatch.exchange_begin) -> the method. Every refusal is a JSON-RPC error object;
the OpenWOP envelope never answers here (core.protocol excludes /mcp).

Handshake-era revisions (apps/mcp/handshake.py) share the mount when the operator offers them: a
request without the 2026-07-28 `_meta` envelope that is `initialize`, or names an `Mcp-Session-Id`,
takes the session path; DELETE with a session id ends it. Everything else is the stateless ladder.

Long answers: a `tools/call` still waiting after SSE_AFTER_SECONDS, from a client that accepts
`text/event-stream`, is answered as an SSE stream instead: a comment at once (so the headers go out),
a keep-alive comment every SSE_KEEPALIVE_SECONDS (proxies drop idle connections), then the one
JSON-RPC response as a `message` event. Refusals never stream: they happen before the wait
(tools.tool_call_begin) and keep their HTTP status. Quick answers stay plain JSON.

Log and progress: a `tools/call` whose `_meta` carries `io.modelcontextprotocol/logLevel` or
`progressToken`, from a client that accepts `text/event-stream`, is answered as an SSE stream at
once: its run's `notifications/message` / `notifications/progress` as the run's events commit
(apps/mcp/notifications.py), then the response. Without either, nothing of that runs.

Cancellation: Django's ASGI handler cancels this view when the server reports `http.disconnect`,
which surfaces as CancelledError inside `tools/call`'s wait (tools.py cancels the run there).
Once the view has returned its response nothing it started can be cancelled by the connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DataError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.http.request import validate_host
from django.views.decorators.csrf import csrf_exempt
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR

from apps.core.db_threads import release_db_connection_if_used
from apps.core.errors import OpenWopError, Unauthenticated
from apps.core.json_limits import request_json
from apps.core.logformat import log_bind
from apps.core.overload import OVERLOAD_RETRY_AFTER_SECONDS, is_overload
from apps.core.sse import sse_counted
from apps.mcp.authorization import insufficient_scope_error, method_family, unauthenticated_error
from apps.mcp.dispatch import dispatch_begin, exchange_begin
from apps.mcp.errors import McpError, mcp_error_from, mcp_error_from_data_error, params_check, request_id_valid
from apps.mcp.handshake import (
    HANDSHAKE_REVISIONS,
    SESSION_HEADER,
    handshake_dispatch_begin,
    handshake_revisions_offered,
    initialize,
    modern_envelope,
    session_exchange,
    session_of,
    session_unknown,
)
from apps.mcp.notifications import NotificationAsk, RunFinish, notification_ask, run_notifications
from apps.mcp.sessions import session_end
from apps.mcp.tools import Finish
from apps.mcp.waiting import cancelled
from apps.oauth.challenge import aoauth_door_state, scopes_missing
from apps.tenants.selectors import asubject_from_authorization_cached
from apps.tenants.subject import Subject

logger = logging.getLogger(__name__)
SSE_AFTER_SECONDS = 1.0
SSE_KEEPALIVE_SECONDS = 15.0
T = TypeVar("T")


def _json(payload: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    # Bytes, not str: HttpResponse would otherwise look up the charset in settings to encode it.
    content = json.dumps(payload, separators=(",", ":")).encode()
    response = HttpResponse(content, status=status, content_type="application/json")
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _error(request_id: Any, error: McpError) -> HttpResponse:
    return _json({"jsonrpc": "2.0", "id": request_id, "error": error.error_object()}, error.http_status, error.headers)


def origin_allowed(origin: str | None) -> bool:
    """No Origin (a non-browser client) is fine; a browser origin must name a host we serve."""
    if origin is None:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    public = urlsplit(settings.OPENWOP_PUBLIC_URL)
    if (parts.scheme, parts.netloc) == (public.scheme, public.netloc):
        return True
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return validate_host(host, settings.ALLOWED_HOSTS)


async def _session_path(body: dict[str, Any], headers: dict[str, str]) -> bool:
    """Is this a handshake-era request? Only when no 2026-07-28 envelope claims it."""
    if modern_envelope(body.get("params")):
        return False
    if SESSION_HEADER.lower() in headers or headers.get("mcp-protocol-version") in HANDSHAKE_REVISIONS:
        return True
    return body.get("method") == "initialize" and bool(await sync_to_async(handshake_revisions_offered)())


async def _authenticate(request: HttpRequest, request_id: Any) -> Subject | HttpResponse:
    """The caller's Subject (an access token must be addressed to the mount: door "mcp"), or the
    401 with the identity code in `data.reason` and, on a host with an OAuth lane, the RFC 9728
    challenge (apps/mcp/authorization.py)."""
    authorization = request.headers.get("Authorization")
    try:
        return await asubject_from_authorization_cached(authorization, door="mcp")  # a hit awaits nothing
    except Unauthenticated as exc:
        state = await aoauth_door_state()
        presented = bool(authorization and authorization.strip())
        return _error(request_id, unauthenticated_error(exc, state=state, presented=presented))


async def _scope_refusal(subject: Subject, method: str) -> McpError | None:
    """The 403 scope challenge when the caller's access token lacks a scope its issuer requires
    for the method's family; None otherwise (API keys carry no scopes: never refused here)."""
    if subject.scopes is None:
        return None
    state = await aoauth_door_state()
    missing = scopes_missing(state, subject, method_family(method))
    return insufficient_scope_error(state=state, method=method, scopes=missing) if missing else None


async def _session_delete(request: HttpRequest) -> HttpResponse:
    subject = await _authenticate(request, None)
    if isinstance(subject, HttpResponse):
        return subject
    ended = await sync_to_async(session_end)(subject=subject, session_id=request.headers[SESSION_HEADER])
    return HttpResponse(status=204) if ended else _error(None, session_unknown())


async def _not_allowed() -> HttpResponse:
    """DELETE exists only while handshake-era sessions can (2026-07-28 alone is POST only)."""
    sessions = bool(await sync_to_async(handshake_revisions_offered)())
    return HttpResponse(status=405, headers={"Allow": "POST, DELETE" if sessions else "POST"})


@csrf_exempt
async def mcp_endpoint(request: HttpRequest) -> HttpResponseBase:
    if request.method not in ("POST", "DELETE"):
        # No GET stream: the server never starts a conversation (405 is the transport's answer).
        return await _not_allowed()
    if not origin_allowed(request.headers.get("Origin")):
        return _error(None, McpError(INVALID_REQUEST, "Origin not allowed", http_status=403))
    if request.method == "DELETE":
        if SESSION_HEADER not in request.headers:
            return await _not_allowed()  # stateless: no session to end
        return await _session_delete(request)
    try:
        body = request_json(request)
    except (ValueError, UnicodeDecodeError):
        return _error(None, McpError(PARSE_ERROR, "Parse error"))
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0" or not isinstance(body.get("method"), str):
        request_id = body.get("id") if isinstance(body, dict) else None
        request_id = request_id if request_id_valid(request_id) else None
        return _error(request_id, McpError(INVALID_REQUEST, "Invalid Request"))
    if "id" in body and not request_id_valid(body["id"]):
        return _error(None, McpError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer"))
    request_id = body.get("id")
    params = body.get("params")
    task_id = params.get("taskId") if isinstance(params, dict) else None
    # The request's log lines name its method and task (its tenant once the key resolves).
    log_bind(operation=body["method"], task_id=task_id if isinstance(task_id, str) else None)
    subject = await _authenticate(request, request_id)
    if isinstance(subject, HttpResponse):
        return subject
    refusal = await _scope_refusal(subject, body["method"])
    if refusal is not None:
        return _error(request_id, refusal)
    headers = {name.lower(): value for name, value in request.headers.items()}
    origin = request.headers.get("Origin")
    try:
        session_path = await _session_path(body, headers)
        if "id" not in body:
            # A notification. On HTTP none asks anything of us: closing the stream is the cancel.
            if session_path and body["method"] != "initialize":
                await sync_to_async(session_of)(subject, headers)
            return HttpResponse(status=202)
        params_check(body.get("params"))
        if session_path and body["method"] == "initialize":
            result, session_id = await sync_to_async(initialize)(subject, body.get("params"), origin)
            return _json({"jsonrpc": "2.0", "id": request_id, "result": result}, headers={SESSION_HEADER: session_id})
        if session_path:
            exchange = await sync_to_async(session_exchange)(subject, headers, body.get("params"), origin)
            finish = await handshake_dispatch_begin(exchange, body["method"], body.get("params"))
        else:
            exchange, recorded = await exchange_begin(body=body, subject=subject, headers=headers, origin=origin)
            try:  # the method runs while the exchange's record commits; nothing answers before it has
                finish = await dispatch_begin(exchange, body["method"], body.get("params"))
            finally:
                await asyncio.shield(recorded)
    except (McpError, OpenWopError, DataError) as exc:  # the host's refusals (_failed maps them)
        return _json(*_failed(request_id, exc))
    # Only a tools/call's `_meta` may ask for its run's log or progress (notifications.py).
    ask = notification_ask(body.get("params")) if body["method"] == "tools/call" else None
    return await _respond(request, request_id, finish, ask)


Outcome = tuple[dict[str, Any], int, dict[str, str]]  # (JSON-RPC message, HTTP status, headers)


async def _outcome(request_id: Any, answer: Awaitable[dict[str, Any]]) -> Outcome:
    """A step's answer (a finished task, or the step awaited in the request itself when it waits
    for nothing) as (JSON-RPC message, HTTP status, headers)."""
    try:
        return {"jsonrpc": "2.0", "id": request_id, "result": await answer}, 200, {}
    except Exception as exc:
        return _failed(request_id, exc)


def _failed(request_id: Any, exc: Exception) -> Outcome:
    """A step's exception as its JSON-RPC error: never a stack trace on the wire, streamed or not."""
    if isinstance(exc, McpError):
        error = exc
    elif isinstance(exc, OpenWopError):
        error = mcp_error_from(exc)
    elif isinstance(exc, DataError):  # a value the database refused that the parse step missed
        error = mcp_error_from_data_error(exc)
    elif is_overload(exc):  # saturated, not broken: retriable (apps/core/overload.py)
        error = McpError(
            INTERNAL_ERROR, "The host is saturated; retry shortly.", {"reason": "overloaded"}, http_status=503
        )
        error.headers["Retry-After"] = str(OVERLOAD_RETRY_AFTER_SECONDS)
    else:
        logger.exception("MCP request failed", exc_info=exc)
        error = McpError(INTERNAL_ERROR, "Internal error")
    return {"jsonrpc": "2.0", "id": request_id, "error": error.error_object()}, error.http_status, error.headers


def _answered_at_once(finish: Finish) -> bool:
    """A tools/call whose new run committed terminal: its answer is read from the run as
    committed (tools._answer), never waited for, so it needs no task and no streaming timer."""
    return isinstance(finish, RunFinish) and finish.committed is not None and finish.committed.is_terminal


def _detached(step: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
    # The request's own thread context (the door's ThreadSensitiveContext, apps/doors/asgi.py)
    # lives until the answer, streamed or not, is sent: the step shares it.
    return asyncio.ensure_future(step())


async def _respond(
    request: HttpRequest, request_id: Any, finish: Finish, ask: NotificationAsk | None = None
) -> HttpResponseBase:
    if ask is None and _answered_at_once(finish):
        return _json(*await _outcome(request_id, finish()))
    task = _detached(finish)
    streamable = "text/event-stream" in request.headers.get("Accept", "")
    if ask is not None and streamable and isinstance(finish, RunFinish):
        return await _respond_notified(request_id, finish, ask, task)
    try:
        await release_db_connection_if_used()
        await asyncio.wait({task}, timeout=SSE_AFTER_SECONDS if streamable else None)
    except asyncio.CancelledError:  # the client went away before any byte of the answer
        await cancelled(task)
        raise
    if task.done():
        return _json(*await _outcome(request_id, task))
    return _stream(_sse(request_id, task))


def _stream(events: AsyncIterator[bytes]) -> StreamingHttpResponse:
    return StreamingHttpResponse(
        sse_counted(events),  # openwop_sse_streams_open
        content_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _sse_message(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message, separators=(",", ":")).encode() + b"\n\n"


async def _respond_notified(
    request_id: Any, finish: RunFinish, ask: NotificationAsk, task: asyncio.Future[dict[str, Any]]
) -> HttpResponseBase:
    """A tools/call that asked for its run's log or progress: an SSE stream at once, the run's
    notifications as its events commit, then the response (2026-07-28 streamable HTTP: only
    notifications related to the request, then its response)."""
    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for message in run_notifications(finish=finish, ask=ask, answered=task):
                queue.put_nowait(message)
        except Exception:  # telling the run is best effort; the response is not
            logger.exception("MCP notifications of run %s failed", finish.run_id)
        finally:
            queue.put_nowait(None)

    pumping = _detached(pump)
    try:
        await release_db_connection_if_used()
    except asyncio.CancelledError:
        await cancelled(task)
        await cancelled(pumping)
        raise
    return _stream(_sse(request_id, task, pumping, queue))


async def _sse(
    request_id: Any,
    task: asyncio.Future[dict[str, Any]],
    pumping: asyncio.Future[Any] | None = None,
    queue: asyncio.Queue[dict[str, Any] | None] | None = None,
) -> AsyncIterator[bytes]:
    """Keep-alive comments while the run works (after the run's notifications, when `queue`
    carries them), then the response; until that last event is out the run still belongs to the
    request (a disconnect cancels the stream, and so the run and the pump)."""
    try:
        yield b": the tool is running\n\n"
        while queue is not None:
            try:
                message = await asyncio.wait_for(queue.get(), SSE_KEEPALIVE_SECONDS)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if message is None:
                break
            yield _sse_message(message)
        while not (await asyncio.wait({task}, timeout=SSE_KEEPALIVE_SECONDS))[0]:
            yield b": keep-alive\n\n"
        response, _, _ = await _outcome(request_id, task)
        yield _sse_message(response)
    finally:
        for future in (task, pumping):
            if future is not None and not future.done():
                await cancelled(future)
