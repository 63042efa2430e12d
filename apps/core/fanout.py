"""One log read per wake-up per stream key in this process, fanned out to every local subscriber.

Streams that each joined the wake-up group and read the log themselves would cost N reads, N
thread hops and N channel-layer messages per event for N subscribers of one run (bench/README.md
§SSE fan-out). Instead the first subscriber of a key starts a **feed**: one task that joins the
wake-up group once, reads the log after its own head on each wake-up (and every `poll_seconds`
anyway), renders each row to its SSE bytes once, keeps the last `BUFFER_FRAMES` of them and tells
the subscribers. Each subscriber keeps its own cursor and takes from the buffer what lies after it.

- **Late joiners and laggards** read the database themselves: a new subscriber replays from its
  position before it joins, and one whose cursor has fallen behind the buffer (it was slow to
  write, or joined at an old position) reads the rest itself. So the buffer bounds memory (per
  key, `BUFFER_FRAMES` frames) without ever losing an event.
- **Nobody waits on anybody**: the feed never awaits a subscriber; a slow or gone client only
  stalls its own generator. The feed stops (and leaves the group) once it has no subscriber.
- **Authorization is unchanged**: a subscriber is authorized, and its tenant-scoped run resolved,
  before it opens its stream; the key carries the tenant and the run, and the feed's read is the
  same tenant-scoped read a stream ran before.
- **Threads and connections**: the feed runs in a context of its own (not the first subscriber's
  request, whose thread goes away with it) and reads on the loop's executor threads, giving the
  connection back after each read; nothing holds a database connection while waiting.
- **A failed read costs latency, not the stream**: a read that fails (the pool exhausted, the
  database restarting) is logged and retried at the next wake-up or poll.

The wire is what `apps.core.sse.stream_log` sends: ": stream open", the same frames, the same
heartbeats after `heartbeat_seconds` without an event, and the end after the terminal frame.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async

from apps.core.db_threads import db_connection_release
from apps.core.metrics import SSE_STREAMS
from apps.core.sse import wake_waiter

logger = logging.getLogger(__name__)

# Frames kept per key for subscribers that are a little behind; one further behind reads the
# database. 256 frames of a few hundred bytes each: well under a megabyte per followed run.
BUFFER_FRAMES = 256


@dataclass(frozen=True, slots=True)
class Frame:
    id: int  # the log sequence: frames are read and kept in increasing order
    data: bytes  # the SSE bytes, rendered once for every subscriber
    terminal: bool = False  # the stream ends after this frame


# Synchronous (it runs on a thread): the frames after a position, in order, every one of them.
Read = Callable[[int], list[Frame]]
# The same read from the event loop (PostgreSQL's async pool): the feed's, when the caller has one.
SharedRead = Callable[[int], Awaitable[list[Frame]]]


@dataclass(eq=False)
class _Feed:
    key: Hashable
    group: str
    read: Read
    shared_read: SharedRead | None
    poll_seconds: float
    head: int  # the newest id read; every frame with base < id <= head is in `frames`
    base: int
    frames: list[Frame] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    subscribers: int = 0
    closed: bool = False
    terminal: int | None = None  # the id of the terminal frame, once read: the log ends there
    task: asyncio.Task[None] | None = None
    sinks: set[_Sink] = field(default_factory=set)  # subscribers written to by the feed itself

    def after(self, position: int) -> list[Frame] | None:
        """The buffered frames after `position`, or None when the buffer no longer covers it."""
        if position < self.base:
            return None
        return self.frames[bisect.bisect_right(self.ids, position) :]

    def add(self, frames: list[Frame]) -> None:
        before = self.head
        fresh = []
        for frame in frames:
            if frame.id > self.head:
                self.frames.append(frame)
                self.ids.append(frame.id)
                self.head = frame.id
                fresh.append(frame)
                if frame.terminal:
                    self.terminal = frame.id
        if fresh and self.sinks:
            _push(self.sinks, before, fresh)
        if len(self.frames) > 2 * BUFFER_FRAMES:  # trim in batches, not on every frame
            drop = len(self.frames) - BUFFER_FRAMES
            self.base = self.ids[drop - 1]
            del self.frames[:drop], self.ids[:drop]


_feeds: dict[Hashable, _Feed] = {}

# ---------------------------------------------------------------------------------------------
# Written by the feed: one loop over the subscribers per batch of frames, no task woken per
# subscriber (bench/README.md §SSE fan-out: waking 1,000 generators per event was the cost).

AsgiSend = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(eq=False)
class _Sink:
    """A subscriber the feed writes to directly: its ASGI `send` and the position it has sent.
    One writer at a time: `busy` while a write (the feed's or its own task's) is under way."""

    send: AsgiSend
    position: int
    written_at: float
    busy: bool = False
    ended: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)


_finishing: set[asyncio.Task[None]] = set()  # writes that had to wait (the client reads slowly)


def _body(data: bytes) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": True}


def _push(sinks: set[_Sink], before: int, fresh: list[Frame]) -> None:
    """The fresh frames, rendered as one chunk once, to every sink that had sent exactly up to
    `before` and is not writing; the others are woken to catch up from the buffer themselves.

    A write is started in place (`send(...)` stepped once): an ASGI server whose socket buffer
    has room (uvicorn: not paused) finishes it without suspending, so no task is scheduled for it.
    One that suspends (a slow reader) is finished by a task of its own; the feed never waits."""
    chunk, position, ended = _batch(fresh)
    now = asyncio.get_running_loop().time()
    written = waiting = 0
    for sink in tuple(sinks):
        if sink.busy or sink.ended:
            continue
        if sink.position != before:
            sink.wake.set()
            continue
        write = sink.send(_body(chunk))
        if not asyncio.iscoroutine(write):  # an awaitable of another kind: stepped the same way
            write = _awaited(write)
        try:
            waiting_on = write.send(None)
        except StopIteration:
            written += 1
            sink.position, sink.written_at = position, now
            if ended:
                sink.ended = True
                sink.wake.set()
            continue
        except Exception:  # the send failed: its own task finds out on its next write
            sink.wake.set()
            continue
        waiting += 1
        sink.busy = True
        task = asyncio.get_running_loop().create_task(_finish(sink, write, waiting_on, position, ended))
        _finishing.add(task)
        task.add_done_callback(_finishing.discard)
    logger.debug(
        "fan-out wrote up to %d: %d at once, %d waiting, of %d subscribers", position, written, waiting, len(sinks)
    )


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


async def _finish(sink: _Sink, write: Any, waiting_on: Any, position: int, ended: bool) -> None:
    """Drive a write that suspended to its end, as a task would have: wait for what it waits on,
    resume it (with the exception, if that failed), repeat until it returns."""
    try:
        while True:
            try:
                if waiting_on is None:  # a bare yield: give the loop one turn
                    await asyncio.sleep(0)
                else:
                    await waiting_on
            except asyncio.CancelledError:
                write.close()
                sink.ended = True
                raise
            except Exception as exc:  # handed to the write, as a task would
                waiting_on = write.throw(exc)
            else:
                waiting_on = write.send(None)
    except StopIteration:
        sink.position, sink.written_at = position, asyncio.get_running_loop().time()
        sink.ended = sink.ended or ended
    except Exception:  # the write failed (the client is gone): its own task ends the stream
        sink.ended = True
    finally:
        sink.busy = False
        sink.wake.set()


def _join(
    key: Hashable, group: str, read: Read, position: int, poll_seconds: float, shared_read: SharedRead | None = None
) -> _Feed:
    """The key's running feed with one more subscriber, or a new one starting at `position`.
    Synchronous: no await between finding the feed and counting the subscriber in, so a feed that
    is closing (it closes synchronously when it finds itself empty) is never joined."""
    feed = _feeds.get(key)
    if feed is None or feed.closed:
        feed = _Feed(key=key, group=group, read=read, shared_read=shared_read, poll_seconds=poll_seconds,
                     head=position, base=position)  # fmt: skip
        _feeds[key] = feed
        # A context of its own: the feed outlives the request that started it, and must not run
        # its reads on that request's thread.
        feed.task = asyncio.get_running_loop().create_task(_pump(feed), context=contextvars.Context())
    feed.subscribers += 1
    return feed


def _close(feed: _Feed) -> None:
    feed.closed = True
    if _feeds.get(feed.key) is feed:
        del _feeds[feed.key]
    for sink in feed.sinks:  # its subscribers join a fresh feed at once, not at their next heartbeat
        sink.wake.set()


async def _pump(feed: _Feed) -> None:
    try:
        async with wake_waiter(feed.group, release_db=False) as wait:
            while feed.subscribers > 0:
                frames = await _shared_read(feed, feed.head)
                if frames:
                    feed.add(frames)
                await wait(feed.poll_seconds)
            _close(feed)  # synchronously after the last check: nobody joins a closing feed
    finally:
        _close(feed)


async def _shared_read(feed: _Feed, after: int) -> list[Frame]:
    try:
        if feed.shared_read is not None:  # on the loop: no thread hop between a wake-up and the push
            return await feed.shared_read(after)
        return await sync_to_async(_read_and_release, thread_sensitive=False)(feed.read, after)
    except Exception as exc:  # the next wake-up or poll reads again (module docstring)
        logger.warning("shared stream read failed (%s); retrying", type(exc).__name__)
        return []


def _read_and_release(read: Read, after: int) -> list[Frame]:
    """One read, whose thread's connection then goes back to the pool (or closes): an executor
    thread serves other work between reads, a request's thread waits between them."""
    try:
        return read(after)
    finally:
        db_connection_release()


async def own_read(read: Read, after: int) -> list[Frame] | None:
    """A subscriber's own read (replay, or catching up behind the buffer), on the request's thread
    like every read of a stream before, giving the connection back after. None when it failed: the
    subscriber tries again after its next wait."""
    try:
        return await sync_to_async(_read_and_release)(read, after)
    except Exception as exc:
        logger.warning("stream read failed (%s); retrying", type(exc).__name__)
        return None


def _batch(frames: list[Frame]) -> tuple[bytes, int, bool]:
    """The frames up to the first terminal one as ONE chunk (the same bytes as one chunk each: a
    subscriber that fell behind catches up in one write to its socket, not one per event), the
    position after them, and whether the stream ends there."""
    for index, frame in enumerate(frames):
        if frame.terminal:
            frames = frames[: index + 1]
            break
    last = frames[-1]
    data = last.data if len(frames) == 1 else b"".join(frame.data for frame in frames)
    return data, last.id, last.terminal


async def _through_queue(fan_out: FanOut) -> AsyncIterator[bytes]:
    """`fan_out.send_to`'s bytes as an async iterator (a streaming response Django iterates): what
    the feed or the subscriber's own task sends passes through a one-slot queue, so a reader that
    has not taken the last chunk makes the next send wait, as a paused transport does (the feed
    then finishes that write on a task of its own and goes on)."""
    chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=1)

    async def send(message: dict[str, Any]) -> None:
        await chunks.put(message["body"])

    writer = asyncio.ensure_future(fan_out._send_to(send))
    try:
        while not (writer.done() and chunks.empty()):
            take = asyncio.ensure_future(chunks.get())
            await asyncio.wait({take, writer}, return_when=asyncio.FIRST_COMPLETED)
            if take.done():
                yield take.result()
            else:
                take.cancel()
        writer.result()  # what it raised, if anything
    finally:
        if not writer.done():
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer


@dataclass(frozen=True, slots=True)
class FanOut:
    """One subscriber of a key's feed: SSE bytes of the log behind `key` after `after`, `first` (the
    caller's replay, already read) or an own read, then the feed. `read` must be the same
    tenant-scoped read for every subscriber of `key`. `head`: the newest id the log held when
    `first` was read; a feed this stream starts begins there at the latest, so a cursor from the
    future (a Last-Event-ID beyond the log) cannot start a feed that skips what comes. The door
    serves it by `send_to` (the feed writes to it), Django by iterating `stream()`."""

    key: Hashable
    group: str
    after: int
    read: Read
    first: list[Frame] | None = None
    head: int | None = None
    heartbeat_seconds: float = 15.0
    poll_seconds: float = 1.0
    shared_read: SharedRead | None = None

    def stream(self) -> AsyncIterator[bytes]:
        return _through_queue(self)

    async def send_to(self, send: AsgiSend) -> None:
        """`stream()`'s bytes as ASGI body messages (`more_body`; the caller ends the response).
        The feed writes each new batch of frames to this subscriber itself, from its one loop over
        its subscribers; this task only opens, replays, catches up when it fell behind (or the
        feed's write could not finish at once), sends the heartbeats, and ends."""
        SSE_STREAMS.inc()
        try:
            await self._send_to(send)
        finally:
            SSE_STREAMS.dec()

    async def _send_to(self, send: AsgiSend) -> None:
        loop = asyncio.get_running_loop()
        await send(_body(b": stream open\n\n"))
        position = self.after
        frames = self.first if self.first is not None else await own_read(self.read, position)
        if frames:
            chunk, position, ended = _batch(frames)
            await send(_body(chunk))
            if ended:
                return
        start = position if self.head is None else min(position, self.head)
        feed = _join(self.key, self.group, self.read, start, self.poll_seconds, self.shared_read)
        sink = _Sink(send=send, position=position, written_at=loop.time())
        feed.sinks.add(sink)
        try:
            while not sink.ended:
                if feed.terminal is not None and sink.position >= feed.terminal:
                    # A cursor past the log (Last-Event-ID beyond it) on a run that has now ended:
                    # the caller holds the end already; close, as for a run that had ended at open.
                    break
                if feed.closed:  # its task failed or the loop is stopping: a fresh feed
                    feed.sinks.discard(sink)
                    feed.subscribers -= 1
                    position = min(sink.position, feed.head)
                    feed = _join(self.key, self.group, self.read, position, self.poll_seconds, self.shared_read)
                    feed.sinks.add(sink)
                sink.wake.clear()
                wait_at_most = self.heartbeat_seconds - (loop.time() - sink.written_at)
                if not sink.busy:
                    frames = feed.after(sink.position)
                    if frames is None:  # behind the buffer: read the rest ourselves, poll meanwhile
                        frames = await own_read(self.read, sink.position) or []
                        wait_at_most = min(wait_at_most, self.poll_seconds)
                    if frames and not sink.busy:
                        chunk, position, ended = _batch(frames)
                        if position > sink.position:  # the feed may have written them meanwhile
                            await _write(sink, chunk)
                            sink.position, sink.ended = position, ended
                        continue
                    if wait_at_most <= 0 and not sink.busy:
                        await _write(sink, b": heartbeat\n\n")
                        continue
                try:
                    async with asyncio.timeout(max(wait_at_most, 0.001)):
                        await sink.wake.wait()
                except TimeoutError:
                    pass
            while sink.busy:  # the feed's last write (the terminal frame) is still under way
                sink.wake.clear()
                await sink.wake.wait()
        finally:
            feed.sinks.discard(sink)
            feed.subscribers -= 1


async def _write(sink: _Sink, data: bytes) -> None:
    """A write of the subscriber's own task; the feed skips the sink meanwhile."""
    sink.busy = True
    try:
        await sink.send(_body(data))
    finally:
        sink.busy = False
        sink.written_at = asyncio.get_running_loop().time()
