"""The feed writes a batch to every caught-up subscriber itself (apps/core/fanout._push), starting
each ASGI send in place: a send that completes at once costs no task, and one that has to wait (a
client that reads slowly: the server's transport is paused) is finished by a task of its own while
the feed goes on to the others. The live path (uvicorn, 50 subscribers) is tests/runs/test_sse_fanout.py."""

from __future__ import annotations

import asyncio
from typing import Any

from apps.core.fanout import Frame, _push, _Sink


class _Client:
    """An ASGI `send` as a server gives it: a coroutine that returns at once, or (while `paused`
    is clear) waits for the transport to drain first, as uvicorn's does."""

    def __init__(self, *, paused: bool = False) -> None:
        self.bodies: list[bytes] = []
        self.drained = asyncio.Event()
        if not paused:
            self.drained.set()

    async def send(self, message: dict[str, Any]) -> None:
        if not self.drained.is_set():
            await self.drained.wait()
        assert message["type"] == "http.response.body" and message["more_body"] is True
        self.bodies.append(message["body"])


def _frame(seq: int, *, terminal: bool = False) -> Frame:
    return Frame(id=seq, data=f"id: {seq}\ndata: {{}}\n\n".encode(), terminal=terminal)


def test_a_slow_client_does_not_hold_up_the_others_and_catches_up() -> None:
    async def scenario() -> None:
        fast, slow, behind = _Client(), _Client(paused=True), _Client()
        now = asyncio.get_running_loop().time()
        sinks = {
            "fast": _Sink(send=fast.send, position=0, written_at=now),
            "slow": _Sink(send=slow.send, position=0, written_at=now),
            "behind": _Sink(send=behind.send, position=-5, written_at=now),  # not where the batch starts
        }
        _push(set(sinks.values()), 0, [_frame(1), _frame(2)])
        # Synchronously: the fast client has the batch as one chunk; the slow one's write waits.
        assert fast.bodies == [_frame(1).data + _frame(2).data] and sinks["fast"].position == 2
        assert slow.bodies == [] and sinks["slow"].busy and sinks["slow"].position == 0
        assert behind.bodies == [] and sinks["behind"].wake.is_set()  # left to catch up itself
        # The next batch reaches the fast client while the slow one is still writing.
        sinks["slow"].wake.clear()
        _push(set(sinks.values()), 2, [_frame(3, terminal=True)])
        assert fast.bodies[-1] == _frame(3).data and sinks["fast"].ended
        assert sinks["slow"].busy and slow.bodies == []
        # The slow client drains: its first write ends, its task is woken to take frame 3 itself.
        slow.drained.set()
        await asyncio.wait_for(sinks["slow"].wake.wait(), 5)
        assert slow.bodies == [_frame(1).data + _frame(2).data]
        assert not sinks["slow"].busy and sinks["slow"].position == 2 and not sinks["slow"].ended

    asyncio.run(scenario())


def test_a_send_that_fails_at_once_wakes_its_own_task() -> None:
    async def scenario() -> None:
        async def gone(message: dict[str, Any]) -> None:
            raise OSError("the client went away")

        sink = _Sink(send=gone, position=0, written_at=0.0)
        _push({sink}, 0, [_frame(1)])
        assert sink.wake.is_set() and sink.position == 0 and not sink.busy

    asyncio.run(scenario())


def test_a_closing_feed_wakes_the_subscribers_it_writes_to() -> None:
    """A feed that stops (its task failed, the loop is stopping) wakes its sinks at once, so each
    joins a fresh feed now rather than at its next heartbeat (15 s of missed pushes)."""
    from apps.core.fanout import _close, _Feed

    async def scenario() -> None:
        feed = _Feed(key=("t", 1), group="g", read=lambda after: [], shared_read=None, poll_seconds=1.0, head=0, base=0)
        sink = _Sink(send=_Client().send, position=0, written_at=0.0)
        feed.sinks.add(sink)
        _close(feed)
        assert feed.closed and sink.wake.is_set()

    asyncio.run(scenario())
