"""What an open stream holds for its whole life, and how it lets go.

- **Its key's stream slot** (apps.core.rate_limits), a leased entry taken before dispatch and
  renewed every `renew_seconds()` while the stream lasts (`stream_slot_held`). It is given back by
  `stream_slot_held` / `stream_slot_give_back`, on a task of its own that the caller only waits
  for shielded: a cancellation (the client left, or the ASGI server's `http.disconnect` after a
  completed response reaching the door's watcher first) interrupts the wait, never the release:
  a slot kept by a finished stream would soon refuse every stream of its key.
- **Its credential**, authorized once when the stream opened. `items_while_allowed` (messages:
  gRPC), `while_allowed` (SSE bytes) and `served_while_allowed` (a door writing the stream itself)
  ask `allowed()` again at least every `OPENWOP_STREAM_RECHECK_SECONDS` and end the stream the
  first time it says no: a revoked key, an expired token, a console user signed out, no longer
  active or no longer a member. An SSE stream ends cleanly after a comment line; gRPC ends with
  UNAUTHENTICATED. A key's check goes through the same cache and invalidation as requests
  (apps.tenants.stream_credential), so it costs no query while the key is unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings

from apps.core.rate_limits import StreamSlot, stream_slot_lease_seconds, stream_slot_release, stream_slot_renew

Allowed = Callable[[], Awaitable[bool]]
T = TypeVar("T")

# The line a stream ends with when its credential no longer holds (an SSE comment: clients skip it).
REVOKED_COMMENT = b": credential no longer valid\n\n"

_releasing: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks


def recheck_seconds() -> float:
    """How often an open stream re-checks its credential; at least 0.1 s (a busy loop otherwise)."""
    return max(0.1, float(getattr(settings, "OPENWOP_STREAM_RECHECK_SECONDS", 5)))


async def stream_slot_give_back(slot: StreamSlot) -> None:
    """Release the slot; a cancellation of the caller meanwhile does not stop the release."""
    release = asyncio.get_running_loop().create_task(sync_to_async(stream_slot_release, thread_sensitive=False)(slot))
    _releasing.add(release)
    release.add_done_callback(_releasing.discard)
    await asyncio.shield(release)


def renew_seconds() -> float:
    """How often a held slot's lease is renewed: every recheck, and at least three times a lease."""
    return min(recheck_seconds(), stream_slot_lease_seconds() / 3)


async def _renew_forever(slot: StreamSlot) -> None:
    renew = sync_to_async(stream_slot_renew, thread_sensitive=False)
    every = renew_seconds()
    while True:
        await asyncio.sleep(every)
        await renew(slot)


@contextlib.asynccontextmanager
async def stream_slot_held(slot: StreamSlot | None) -> AsyncIterator[None]:
    """The one owner of a slot taken at admission (`slot` None: none was taken): its lease is
    renewed while the block lasts, and it goes back when the block ends, however it ends
    (completed, cancelled, disconnected, error). A process that dies meanwhile renews nothing,
    so its slots free themselves within a lease (apps.core.rate_limits)."""
    renewing = None if slot is None else asyncio.get_running_loop().create_task(_renew_forever(slot))
    try:
        yield
    finally:
        if renewing is not None:
            renewing.cancel()
        if slot is not None:
            await stream_slot_give_back(slot)


class CredentialLapsed(Exception):
    """The stream's credential no longer holds: the binding ends the stream in its own way."""


async def items_while_allowed(stream: AsyncIterator[T], allowed: Allowed) -> AsyncGenerator[T, None]:
    """`stream`'s items while `allowed()` holds, asked at least every `recheck_seconds()` even on
    a quiet stream; the first no raises CredentialLapsed (and closes `stream`). Each step of
    `stream` runs as a task this generator waits on with a deadline, so a stream blocked waiting
    for its next event is still re-checked on time."""
    loop = asyncio.get_running_loop()
    every = recheck_seconds()
    next_check = loop.time() + every
    iterator = aiter(stream)
    step: asyncio.Task[tuple[T] | None] | None = None
    try:
        while True:
            if step is None:
                step = loop.create_task(_next(iterator))
            await asyncio.wait({step}, timeout=max(0.0, next_check - loop.time()))
            if step.done():
                item = step.result()
                step = None
                if item is None:
                    return
                yield item[0]
            if loop.time() >= next_check:
                if not await allowed():
                    raise CredentialLapsed()
                next_check = loop.time() + every
    finally:
        if step is not None and not step.done():
            step.cancel()
            with contextlib.suppress(BaseException):
                await step
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


async def _next(iterator: AsyncIterator[T]) -> tuple[T] | None:
    try:
        return (await anext(iterator),)
    except StopAsyncIteration:
        return None


async def while_allowed(stream: AsyncIterator[bytes], allowed: Allowed) -> AsyncIterator[bytes]:
    """An SSE stream's bytes while its credential holds (`items_while_allowed`); then it ends with
    `REVOKED_COMMENT`."""
    items = items_while_allowed(stream, allowed)
    async with contextlib.aclosing(items):
        try:
            async for chunk in items:
                yield chunk
        except CredentialLapsed:
            yield REVOKED_COMMENT


async def served_while_allowed(serve: Coroutine[Any, Any, None], allowed: Allowed) -> bool:
    """Await `serve` (a door writing a stream itself) while `allowed()` holds, asked every
    `recheck_seconds()`. True: it was stopped because the credential no longer holds (the caller
    ends the response); False: it ended by itself. A cancellation of the caller cancels it too."""
    task = asyncio.get_running_loop().create_task(serve)
    every = recheck_seconds()
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                task.result()
                return False
            if not await allowed():
                return True
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
