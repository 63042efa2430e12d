"""Server-Sent Events over an append-only log (events.md; STYLE.md habit 9).

The database log is the source of truth. A stream replays rows after the client's position, then
waits: for a wake-up on a channel-layer group (Redis in production) or, at most `poll_seconds`
later, for the next database read, so a wake-up lost between processes (the in-memory layer of
the zero-setup default does not cross them) only costs latency. No transaction is held across a
`yield`; a client disconnect arrives as `CancelledError`, which we let end the stream after
leaving the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import get_channel_layer
from django.http import HttpRequest, StreamingHttpResponse

from apps.core.caller_input import ascii_digits
from apps.core.db_threads import release_db_connection
from apps.core.errors import ValidationFailed
from apps.core.metrics import SSE_STREAMS
from apps.core.resp import resp_client

logger = logging.getLogger(__name__)
_GROUP_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, slots=True)
class SseEvent:
    id: int  # the log sequence, sent as `id:` so a client resumes with Last-Event-ID
    data: dict[str, Any]
    event: str | None = None
    terminal: bool = False  # the stream ends after this event


Fetch = Callable[[int], Awaitable[list[SseEvent]]]


def wake_group_name(kind: str, tenant: str, key: str) -> str:
    """The one name of a wake-up group (channel-layer safe, < 100 chars, always has the tenant)."""
    digest = hashlib.sha256(f"{kind}\x00{tenant}\x00{key}".encode()).hexdigest()[:32]
    return f"ow.{_GROUP_SAFE.sub('_', kind)[:16]}.{_GROUP_SAFE.sub('_', tenant)[:40]}.{digest}"


def publish_wake(group: str) -> None:
    """Wake every stream of `group`. Call from `transaction.on_commit`; best effort by design.

    In a request's sync code (a `sync_to_async` thread of the ASGI server) the send is handed to
    the server's event loop and not waited for: the request does not queue behind the loop and
    Redis for a wake-up whose loss only costs a stream its poll interval. Elsewhere (the worker, a
    command) it is sent and waited for."""
    layer = get_channel_layer()
    if layer is None:
        return
    loop = _server_loop()
    if loop is not None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: fall through
            asyncio.run_coroutine_threadsafe(_send_wake(layer, group), loop)
            return
    with contextlib.suppress(Exception):  # a lost wake-up costs latency, never data
        async_to_sync(layer.group_send)(group, {"type": "log.wake"})


_wakes_in_flight: set[asyncio.Task[None]] = set()


def publish_wake_from_loop(group: str) -> None:
    """`publish_wake` for code running on the event loop itself (the doors' async paths): the send
    becomes a task of this loop and the caller goes on at once. `publish_wake` cannot serve here:
    its blocking send refuses to run on a loop's own thread, and the wake-up would be lost."""
    layer = get_channel_layer()
    if layer is None:
        return
    task = asyncio.get_running_loop().create_task(_send_wake(layer, group))
    _wakes_in_flight.add(task)  # the loop keeps only a weak reference to a task
    task.add_done_callback(_wakes_in_flight.discard)


async def _send_wake(layer: Any, group: str) -> None:
    with contextlib.suppress(Exception):  # a lost wake-up costs latency, never data
        if await _group_empty(layer, group):
            return
        await layer.group_send(group, {"type": "log.wake"})


async def _group_empty(layer: Any, group: str) -> bool:
    """Whether a Redis channel layer's group has no member at all: one `EXISTS` on the loop's RESP
    client (apps/core/resp.py) instead of `group_send`'s pipeline, for the common case of a
    log nobody is streaming. A member joining meanwhile reads the log after joining, so nothing is
    missed; a stale member only means the full `group_send` runs."""
    hosts = getattr(layer, "hosts", None)
    group_key = getattr(layer, "_group_key", None)
    if not hosts or len(hosts) != 1 or group_key is None:
        return False
    address = hosts[0].get("address") if isinstance(hosts[0], dict) else None
    client = resp_client(address, timeout=1.0) if isinstance(address, str) else None
    if client is None:
        return False
    return not await client.exists(group_key(group))


def _server_loop() -> asyncio.AbstractEventLoop | None:
    """The running event loop that called this thread through `sync_to_async`, if any."""
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    if loop is None or getattr(SyncToAsync.threadlocal, "main_event_loop_pid", None) != os.getpid():
        return None
    return loop if loop.is_running() else None


MAX_POSITION = 2**63 - 1  # the sequence columns' bigint: 19 digits


def position_parse(raw: str) -> int | None:
    """A caller's log position (Last-Event-ID, afterSequence), or None when it is not one: ASCII
    digits only, at most a bigint's 19. A well-formed position past any log is kept (clamped to
    the largest a log can hold): it is an exclusive cursor, not refused (events.md §SSE frames)."""
    value = ascii_digits(raw, max_digits=19)
    return None if value is None else min(value, MAX_POSITION)


def last_event_id(request: HttpRequest, query_param: str | None = None) -> int:
    """The position to resume after: `Last-Event-ID` header (or a query parameter), default 0."""
    raw = request.headers.get("Last-Event-ID")
    if raw is None and query_param:
        raw = request.GET.get(query_param)
    if raw is None or raw == "":
        return 0
    position = position_parse(raw)
    if position is None:
        raise ValidationFailed(
            "Last-Event-ID must be a non-negative integer of at most 19 digits.", details={"field": "Last-Event-ID"}
        )
    return position


def format_event(event: SseEvent) -> bytes:
    lines = [f"id: {event.id}"]
    if event.event:
        lines.append(f"event: {event.event}")
    lines.append("data: " + json.dumps(event.data, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode("utf-8")


_quieted_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def quiet_lost_wakeup_cleanups(loop: asyncio.AbstractEventLoop) -> None:
    """One warning line, not a traceback, when a wake-up's cleanup dies with the channel layer.

    channels_redis removes a received message's backup copy in a task nobody awaits
    (`RedisChannelLayer._clean_receive_backup`); when Redis goes away between the receipt and that
    task, asyncio logs "Task exception was never retrieved" with a full traceback. A wake-up is only
    a hint (the database is the source of truth), so losing its cleanup costs nothing. Every other
    unhandled loop error goes to the handler that was there before. Installed once per loop."""
    if loop in _quieted_loops:
        return
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        future = context.get("future")
        coro = future.get_coro() if isinstance(future, asyncio.Task) else None
        if context.get("exception") is not None and getattr(coro, "__qualname__", "").endswith(
            "._clean_receive_backup"
        ):
            logger.warning("a wake-up's cleanup was lost: %s", type(context["exception"]).__name__)
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    _quieted_loops.add(loop)


@contextlib.asynccontextmanager
async def wake_waiter(group: str, *, release_db: bool = True) -> AsyncIterator[Callable[[float], Awaitable[float]]]:
    """Join `group` and yield `wait(seconds)`: it returns after the group's next wake-up or the
    timeout, whichever is first, and says how long it waited. Joining happens before the caller's
    first read, so a wake-up sent between that read and the wait is kept. The membership is
    dropped on the way out, a client disconnect (CancelledError) included. `release_db=False` is
    for a caller that gives its connection back after each read itself (apps.core.fanout)."""
    layer = get_channel_layer()
    channel: str | None = None
    if layer is not None:
        quiet_lost_wakeup_cleanups(asyncio.get_running_loop())
        try:
            channel = await layer.new_channel()
            await layer.group_add(group, channel)
        except Exception:  # the layer's server is down: database polling alone still delivers everything
            logger.warning("wake-ups unavailable (%s); polling the database only", group)
            channel = None

    async def wait(seconds: float) -> float:
        nonlocal channel
        if release_db:
            # A waiting stream or long poll holds no database connection: without this each open
            # stream kept one for its whole life and the pool ran out after a few dozen of them.
            await release_db_connection()
        loop = asyncio.get_running_loop()
        started = loop.time()
        if channel is not None:
            try:
                await asyncio.wait_for(layer.receive(channel), seconds)
            except TimeoutError:
                pass
            except Exception:  # the layer failed mid-wait (Redis gone): fall back to polling for good
                logger.warning("wake-ups lost (%s); polling the database only", group)
                channel = None
        remaining = seconds - (loop.time() - started)
        if channel is None and remaining > 0:
            await asyncio.sleep(remaining)
        return loop.time() - started

    try:
        yield wait
    finally:
        if channel is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(layer.group_discard(group, channel))


async def log_events(
    *,
    group: str,
    after: int,
    fetch: Fetch,
    poll_seconds: float = 1.0,
    heartbeat_seconds: float | None = None,
) -> AsyncGenerator[SseEvent | None, None]:
    """A log's events after `after` as they commit (`fetch` reads them; the group's wake-ups
    shorten the wait between reads), ending after a terminal one. With `heartbeat_seconds`, None
    marks a quiet stretch that long (a transport that needs keep-alives sends one). Close it
    (`contextlib.aclosing`) to leave the wake-up group at once."""
    async with wake_waiter(group) as wait:
        position = after
        idle = 0.0
        while True:
            for event in await fetch(position):
                yield event
                position = event.id
                idle = 0.0
                if event.terminal:
                    return
            idle += await wait(poll_seconds)
            if heartbeat_seconds is not None and idle >= heartbeat_seconds:
                idle = 0.0
                yield None


async def stream_log(
    *,
    group: str,
    after: int,
    fetch: Fetch,
    heartbeat_seconds: float = 15.0,
    poll_seconds: float = 1.0,
) -> AsyncIterator[bytes]:
    """`log_events` as SSE bytes: an opening comment, each event, a heartbeat comment when quiet."""
    yield b": stream open\n\n"
    events = log_events(
        group=group, after=after, fetch=fetch, poll_seconds=poll_seconds, heartbeat_seconds=heartbeat_seconds
    )
    async with contextlib.aclosing(events):
        async for event in events:
            yield b": heartbeat\n\n" if event is None else format_event(event)


async def sse_counted(stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The stream, counted in `openwop_sse_streams_open` from its first byte to its end."""
    SSE_STREAMS.inc()
    try:
        async for chunk in stream:
            yield chunk
    finally:
        SSE_STREAMS.dec()
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


def sse_response(stream: AsyncIterator[bytes]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(sse_counted(stream), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
