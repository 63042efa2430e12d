"""Waiting on a run and streaming it, from its log (STYLE.md habit 9).

Both read the database in single statements on the event loop (apps/runs/reads.py) and wait on
the run's wake-up group between reads, re-reading every `DB_RECHECK_SECONDS` anyway (a wake-up
lost between processes only costs latency). No transaction or connection is held across a wait or
a `yield`; a client disconnect arrives as `CancelledError` and ends the stream: the run belongs to
no stream, so nothing else happens to it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from a2a.types import StreamResponse, Task

from apps.core.sse import SseEvent, format_event, log_events, wake_waiter
from apps.runs.a2a_wire import INTERRUPTED_STATES, TERMINAL_STATES, StreamProjection, to_wire
from apps.runs.log import run_wake_group
from apps.runs.models import TERMINAL_STATUSES, WAITING_STATUSES, Run
from apps.runs.reads import RunRow, events_after, snapshot_read

DB_RECHECK_SECONDS = 0.5
SSE_HEARTBEAT_SECONDS = 15.0  # a comment line on a quiet SSE stream (as apps.core.sse.stream_log)
# A blocking SendMessage answers when the run is terminal or interrupted, or after this long with
# the task as it is then (map SendMessage row: "or host timeout").
BLOCKING_WAIT_SECONDS = 60.0
SETTLED_STATUSES = TERMINAL_STATUSES | WAITING_STATUSES  # terminal, or suspended on an interrupt

Frame = Callable[[StreamResponse], dict[str, Any]]


async def run_wait_settled(run: Run | RunRow, *, timeout: float = BLOCKING_WAIT_SECONDS) -> None:
    """Return once the run is terminal or suspended on an interrupt, or after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with wake_waiter(run_wake_group(run.run_id)) as wait:
        while True:
            snapshot = await snapshot_read(tenant_pk=run.tenant_id, run_id=run.run_id, artifacts=False)
            if snapshot.run.status in SETTLED_STATUSES:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            await wait(min(DB_RECHECK_SECONDS, remaining))


def _task_log(
    *, run: RunRow, first: Task, position: int, end_when_interrupted: bool, heartbeat_seconds: float | None
) -> AsyncGenerator[SseEvent | None, None]:
    """The stream every binding sends, as events whose `data` is the StreamResponse message: the
    Task first, then the run log after `position` projected as status and artifact updates, ending
    after the terminal status (or, for a send, an interrupted one). None: a heartbeat is due."""
    projection = StreamProjection(task_id=first.id, context_id=first.context_id, state=first.status.state)
    sent_first = False

    def ends() -> bool:
        return projection.ended or (end_when_interrupted and projection.interrupted)

    async def fetch(after: int) -> list[SseEvent]:
        nonlocal sent_first
        out: list[SseEvent] = []
        if not sent_first:
            sent_first = True
            done = first.status.state in TERMINAL_STATES or (
                end_when_interrupted and first.status.state in INTERRUPTED_STATES
            )
            out.append(SseEvent(id=position, data=StreamResponse(task=first), terminal=done))
            if done:
                return out
        events = await events_after(tenant_pk=run.tenant_id, run_pk=run.pk, after=after)
        for event in events:
            responses = projection.project([event])
            for index, response in enumerate(responses):
                last = index == len(responses) - 1
                out.append(SseEvent(id=event.sequence, data=response, terminal=last and ends()))
            if ends():
                return out
        return out

    return log_events(
        group=run_wake_group(run.run_id),
        after=position,
        fetch=fetch,
        poll_seconds=DB_RECHECK_SECONDS,
        heartbeat_seconds=heartbeat_seconds,
    )


async def task_stream(
    *,
    run: RunRow,
    first: Task,
    position: int,
    frame: Frame,
    end_when_interrupted: bool,
) -> AsyncIterator[bytes]:
    """The task stream as SSE bytes (JSON-RPC and HTTP+JSON), each message framed by `frame`."""
    yield b": stream open\n\n"
    events = _task_log(
        run=run, first=first, position=position, end_when_interrupted=end_when_interrupted,
        heartbeat_seconds=SSE_HEARTBEAT_SECONDS,
    )  # fmt: skip
    async with contextlib.aclosing(events):
        async for event in events:
            if event is None:
                yield b": heartbeat\n\n"
            else:
                yield format_event(replace(event, data=frame(event.data)))  # type: ignore[arg-type]


async def task_responses(
    *, run: RunRow, first: Task, position: int, end_when_interrupted: bool
) -> AsyncIterator[StreamResponse]:
    """The task stream as messages (gRPC frames them itself; HTTP/2 keeps the connection alive)."""
    events = _task_log(
        run=run, first=first, position=position, end_when_interrupted=end_when_interrupted, heartbeat_seconds=None
    )
    async with contextlib.aclosing(events):
        async for event in events:
            if event is not None:
                yield event.data  # type: ignore[misc]


def jsonrpc_frame(request_id: Any) -> Frame:
    return lambda response: {"jsonrpc": "2.0", "id": request_id, "result": to_wire(response)}


rest_frame: Frame = to_wire
