"""One log read per wake-up per stream key in this process, fanned out to every local subscriber.

Before this, each open SSE stream of a run joined the run's wake-up group itself and, on every
wake-up and every poll, ran its own read of the log on its own thread: with N subscribers of one
run each event cost N reads, N thread hops and N channel-layer messages (bench/README.md §SSE
fan-out: 100 streams saturated a core). Here the first subscriber of a key starts a **feed**: one
task that joins the wake-up group once, reads the log after its own head on each wake-up (and every
`poll_seconds` anyway), renders each row to its SSE bytes once, keeps the last `BUFFER_FRAMES` of
them and tells the subscribers. Each subscriber keeps its own cursor and takes from the buffer what
lies after it.

- **Late joiners and laggards** read the database themselves, as every stream did before: a new
  subscriber replays from its position before it joins, and one whose cursor has fallen behind the
  buffer (it was slow to write, or joined at an old position) reads the rest itself. So the buffer
  bounds memory (per key, `BUFFER_FRAMES` frames) without ever losing an event.
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
import contextvars
import logging
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async

from apps.core.db_threads import db_connection_release
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


@dataclass(eq=False)
class _Feed:
    key: Hashable
    group: str
    read: Read
    poll_seconds: float
    head: int  # the newest id read; every frame with base < id <= head is in `frames`
    base: int
    frames: list[Frame] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    subscribers: int = 0
    closed: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def after(self, position: int) -> list[Frame] | None:
        """The buffered frames after `position`, or None when the buffer no longer covers it."""
        if position < self.base:
            return None
        return self.frames[bisect.bisect_right(self.ids, position) :]

    def add(self, frames: list[Frame]) -> None:
        for frame in frames:
            if frame.id > self.head:
                self.frames.append(frame)
                self.ids.append(frame.id)
                self.head = frame.id
        if len(self.frames) > 2 * BUFFER_FRAMES:  # trim in batches, not on every frame
            drop = len(self.frames) - BUFFER_FRAMES
            self.base = self.ids[drop - 1]
            del self.frames[:drop], self.ids[:drop]
        self.notify()

    def notify(self) -> None:
        """Wake every subscriber waiting now; later waiters wait on the fresh event."""
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


_feeds: dict[Hashable, _Feed] = {}


def feeds_open() -> int:
    """How many feeds this process runs (tests)."""
    return len(_feeds)


def _join(key: Hashable, group: str, read: Read, position: int, poll_seconds: float) -> _Feed:
    """The key's running feed with one more subscriber, or a new one starting at `position`.
    Synchronous: no await between finding the feed and counting the subscriber in, so a feed that
    is closing (it closes synchronously when it finds itself empty) is never joined."""
    feed = _feeds.get(key)
    if feed is None or feed.closed:
        feed = _Feed(key=key, group=group, read=read, poll_seconds=poll_seconds, head=position, base=position)
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
    feed.notify()  # its subscribers (if any are left after a failure) join a new feed


async def _pump(feed: _Feed) -> None:
    try:
        async with wake_waiter(feed.group, release_db=False) as wait:
            while feed.subscribers > 0:
                frames = await _shared_read(feed.read, feed.head)
                if frames:
                    feed.add(frames)
                await wait(feed.poll_seconds)
            _close(feed)  # synchronously after the last check: nobody joins a closing feed
    finally:
        _close(feed)


async def _shared_read(read: Read, after: int) -> list[Frame]:
    try:
        return await sync_to_async(_read_and_release, thread_sensitive=False)(read, after)
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


async def fanned_stream(
    *,
    key: Hashable,
    group: str,
    after: int,
    read: Read,
    first: list[Frame] | None = None,
    head: int | None = None,
    heartbeat_seconds: float = 15.0,
    poll_seconds: float = 1.0,
) -> AsyncIterator[bytes]:
    """SSE bytes of the log behind `key` after `after`: `first` (the caller's replay, already read)
    or an own read, then the key's feed. `read` must be the same tenant-scoped read for every
    subscriber of `key` (the key names what it reads). `head`: the newest id the log held when
    `first` was read; a feed this stream starts begins there at the latest, so a cursor from the
    future (a client's Last-Event-ID beyond the log) cannot start a feed that skips what comes."""
    loop = asyncio.get_running_loop()
    position = after
    yield b": stream open\n\n"
    frames = first if first is not None else await own_read(read, position)
    if frames:
        chunk, position, ended = _batch(frames)
        yield chunk
        if ended:
            return
    feed = _join(key, group, read, position if head is None else min(position, head), poll_seconds)
    try:
        idle = 0.0
        while True:
            if feed.closed:  # its task failed or the loop is stopping: a fresh feed
                feed.subscribers -= 1
                feed = _join(key, group, read, min(position, feed.head), poll_seconds)
            changed = feed.changed  # taken before reading, so a frame added meanwhile wakes us
            frames = feed.after(position)
            wait_at_most = heartbeat_seconds - idle
            if frames is None:  # behind the buffer: read the rest ourselves, and poll meanwhile
                frames = await own_read(read, position) or []
                wait_at_most = min(wait_at_most, poll_seconds)
            if frames:
                chunk, position, ended = _batch(frames)
                yield chunk
                idle = 0.0
                if ended:
                    return
                continue
            started = loop.time()
            try:
                async with asyncio.timeout(max(wait_at_most, 0.001)):
                    await changed.wait()
            except TimeoutError:
                pass
            idle += loop.time() - started
            if idle >= heartbeat_seconds:
                idle = 0.0
                yield b": heartbeat\n\n"
    finally:
        feed.subscribers -= 1
