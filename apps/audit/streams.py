"""`/host/events` as Server-Sent Events, and the one name of a stream's wake-up group.

Frames follow RFC 0236: `event:` is the type, `data:` the host-event envelope, and `id:` the
eventId on a durable event and absent on an ephemeral one, so a client's `Last-Event-ID` is always
a durable event to resume after. That is why this loop is not `apps.core.sse.stream_log`, whose
`id:` is always the integer log position; it keeps the same discipline (database first, the
channel layer only as a wake-up, no transaction across a `yield`, disconnect ends the stream).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async

from apps.audit.models import HostEvent
from apps.audit.selectors import HostEventCursor, host_events_after
from apps.core.sse import wake_group_name, wake_waiter

HEARTBEAT_SECONDS = 15.0  # events.md: a keep-alive comment at least every 30 s
POLL_SECONDS = 1.0  # a wake-up lost between processes costs at most this much latency


def host_event_wake_group(*, tenant: str, subject_id: str) -> str:
    return wake_group_name("host", tenant, subject_id)


def host_event_frame(event: HostEvent) -> bytes:
    lines = [f"event: {event.type}"]
    if event.durable:
        lines.append(f"id: {event.event_id}")
    lines.append("data: " + json.dumps(event.as_wire(), separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode("utf-8")


async def host_event_frames(
    *, cursor: HostEventCursor, heartbeat_seconds: float = HEARTBEAT_SECONDS, poll_seconds: float = POLL_SECONDS
) -> AsyncIterator[bytes]:
    """Frames of the cursor's stream until the client goes away (the channel has no terminal event)."""
    group = host_event_wake_group(tenant=cursor.tenant, subject_id=cursor.subject_id)
    fetch = sync_to_async(host_events_after)
    async with wake_waiter(group) as wait:
        position = cursor.after
        idle = 0.0
        yield b": stream open\n\n"
        while True:
            events = await fetch(cursor=cursor, after=position)
            for event in events:
                yield host_event_frame(event)
                position = event.sequence
                idle = 0.0
            if events:
                continue  # a full page may have more behind it
            idle += await wait(poll_seconds)
            if idle >= heartbeat_seconds:
                idle = 0.0
                yield b": heartbeat\n\n"
