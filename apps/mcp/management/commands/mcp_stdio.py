"""`manage.py mcp_stdio --api-key-env VAR`: the MCP mount over stdio (newline-delimited JSON-RPC).

The same ladder and methods as HTTP, minus the routing headers (stdio has none). The caller is the
Subject of the API key named by the environment variable, resolved once at start: no key, no
server. Requests run concurrently, so a `notifications/cancelled` naming one in flight cancels it
(and, for `tools/call`, its run with `mcp-request-cancelled`); a cancelled request gets no answer.
Logs go to stderr; stdout carries only JSON-RPC messages: the responses and, for a `tools/call`
whose `_meta` asked for its run's log or progress, those notifications before its response
(apps/mcp/notifications.py). When the operator offers a handshake-era revision, `initialize` opens
the connection at that revision (the connection is the session).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from typing import Any

from asgiref.sync import sync_to_async
from django.core.management.base import BaseCommand, CommandError
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR

from apps.core.errors import OpenWopError
from apps.core.json_limits import json_loads_limited
from apps.mcp.dispatch import dispatch_begin, exchange_begin
from apps.mcp.errors import McpError, mcp_error_from
from apps.mcp.handshake import (
    connection_exchange,
    handshake_dispatch_begin,
    handshake_revisions_offered,
    initialize_decide,
    modern_envelope,
)
from apps.mcp.notifications import NotificationAsk, RunFinish, notification_ask, run_notifications
from apps.mcp.waiting import cancelled
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.subject import Subject


class StdioServer:
    def __init__(self, subject: Subject) -> None:
        self.subject = subject
        self.in_flight: dict[Any, asyncio.Task[None]] = {}
        self.write_lock = asyncio.Lock()
        self.handshake_version: str | None = None

    async def write(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":")) + "\n"
        async with self.write_lock:
            sys.stdout.write(line)
            sys.stdout.flush()

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.buffer.readline)
            if not line:
                break  # the client closed stdin: shut down (finishing what is in flight)
            if line.strip():
                await self.receive(line)
        if self.in_flight:
            await asyncio.gather(*self.in_flight.values(), return_exceptions=True)

    async def receive(self, line: bytes) -> None:
        try:
            message = json_loads_limited(line)
        except ValueError:
            await self.write(_error(None, McpError(PARSE_ERROR, "Parse error")))
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            await self.write(_error(None, McpError(INVALID_REQUEST, "Invalid Request")))
            return
        method = message.get("method")
        if not isinstance(method, str):
            return  # a response to nothing we asked: the host sends no requests
        if "id" not in message:
            self.notify(method, message.get("params"))
            return
        request_id = message["id"]
        task = asyncio.create_task(self.handle(request_id, message))
        self.in_flight[request_id] = task
        task.add_done_callback(lambda _t: self.in_flight.pop(request_id, None))

    def notify(self, method: str, params: Any) -> None:
        if method == "notifications/cancelled" and isinstance(params, dict):
            task = self.in_flight.get(params.get("requestId"))
            if task is not None:
                task.cancel()

    async def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        """The stateless ladder, or, on a connection opened with `initialize` (handshake-era
        revisions, apps/mcp/handshake.py), that revision: negotiated per request all the same."""
        method, params = message["method"], message.get("params")
        modern = modern_envelope(params)
        if not modern and method == "initialize" and await sync_to_async(handshake_revisions_offered)():
            result = await sync_to_async(initialize_decide)(self.subject, params, None)
            self.handshake_version = result["protocolVersion"]
            return result
        if not modern and self.handshake_version is not None:
            version = self.handshake_version
            exchange = await sync_to_async(connection_exchange)(self.subject, version, version, params, None)
            return await (await handshake_dispatch_begin(exchange, method, params))()
        exchange, recorded = await exchange_begin(body=message, subject=self.subject, headers=None, origin=None)
        await recorded
        finish = await dispatch_begin(exchange, method, params)
        ask = notification_ask(params) if method == "tools/call" else None
        if ask is None or not isinstance(finish, RunFinish):
            return await finish()  # nothing asked, or refused before any run: nothing to tell
        return await self.answer_notified(finish, ask)

    async def answer_notified(self, finish: RunFinish, ask: NotificationAsk) -> dict[str, Any]:
        """`tools/call` writing its run's notifications as they commit, all before its response;
        a cancelled request sends nothing more."""
        step = asyncio.ensure_future(finish())

        async def pump() -> None:
            async for notification in run_notifications(finish=finish, ask=ask, answered=step):
                await self.write(notification)

        pumping = asyncio.ensure_future(pump())
        try:
            await asyncio.wait({step})
            with contextlib.suppress(Exception):  # telling the run is best effort; the response is not
                await pumping
        except asyncio.CancelledError:
            for future in (step, pumping):
                await cancelled(future)
            raise
        return step.result()

    async def handle(self, request_id: Any, message: dict[str, Any]) -> None:
        try:
            response = {"jsonrpc": "2.0", "id": request_id, "result": await self.answer(message)}
        except asyncio.CancelledError:
            return  # cancelled by the client: no response (2026-07-28 basic/patterns/cancellation)
        except McpError as exc:
            response = _error(request_id, exc)
        except OpenWopError as exc:
            response = _error(request_id, mcp_error_from(exc))
        except Exception:  # a bug must not take the whole server down with it
            sys.stderr.write(f"mcp_stdio: request {request_id!r} failed\n")
            response = _error(request_id, McpError(INTERNAL_ERROR, "Internal error"))
        await self.write(response)


def _error(request_id: Any, error: McpError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.error_object()}


class Command(BaseCommand):
    help = "Serve the MCP mount over stdio as the Subject of an API key read from an environment variable."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--api-key-env", required=True, help="Name of the environment variable holding the key.")

    def handle(self, *args: Any, **options: Any) -> None:
        raw = os.environ.get(options["api_key_env"], "")
        if not raw:
            raise CommandError(f"${options['api_key_env']} is empty: an API key is required.")
        try:
            subject = subject_from_api_key(raw)
        except OpenWopError as exc:
            raise CommandError(f"The API key in ${options['api_key_env']} was refused: {exc.code}.") from None
        asyncio.run(StdioServer(subject).serve())
