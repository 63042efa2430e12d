"""Database connections of async code that outlives its request's thread.

Django binds a database connection to the thread that used it, and under ASGI a request's
`sync_to_async` calls share one thread per request (asgiref's `ThreadSensitiveContext`). Two
things follow, both measured (bench/README.md, "MCP tools/call at c = 16"):

- A request that awaits something long keeps that thread's connection checked out for the
  whole wait unless it hands it back: with a pool of 8, the 9th concurrent waiter waited 10 s for
  a connection and answered 500 (`PoolTimeout`).
- Work started in a fresh `contextvars.Context` (to outlive the view) has no request context, so
  asgiref runs all of it, for every request of the process, on ONE shared thread: one connection,
  every waiting request's reads in a single queue.

`release_db_connection` hands the calling context's connection back (to the pool, or closed);
`in_own_db_thread` gives detached work its own thread and connection, released when it ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from asgiref.sync import AsyncToSync, SyncToAsync, ThreadSensitiveContext, sync_to_async
from django.db import connection

T = TypeVar("T")


def db_connection_release() -> None:
    """Give back this thread's connection (to the pool, or closed; a no-op when it has none).
    Inside an atomic block (a test's transaction) nothing is closed."""
    if not connection.in_atomic_block:
        connection.close()


# The same, from async code: runs on the current context's thread, whose connection it releases.
release_db_connection = sync_to_async(db_connection_release)


async def release_db_connection_if_used() -> None:
    """`release_db_connection`, skipped when the current request context never had a thread: in a
    ThreadSensitiveContext with no executor yet no thread-sensitive call ran, so no connection was
    opened, and the release itself would start a thread only to find none (a lean MCP call's
    whole answer runs on the event loop)."""
    context = SyncToAsync.thread_sensitive_context.get(None)
    if context is not None and context not in SyncToAsync.context_to_thread_executor:
        return
    await release_db_connection()


async def in_own_db_thread(step: Callable[[], Awaitable[T]]) -> T:
    """Await `step()` with its own thread for `sync_to_async` calls, and release that thread's
    connection when it ends (success, error or cancellation): a thread that ends holding a
    pooled connection never gives it back.

    Under an `async_to_sync` caller (Django's test client, a management command) the loop already
    sends every thread-sensitive call to that caller's one thread, the thread whose connection
    holds the test's transaction; a thread of our own would read through another connection and
    not see it. There is nothing to untangle there, so the step runs as it is."""
    if asyncio.get_running_loop() in AsyncToSync.loop_thread_executors:
        return await step()
    async with ThreadSensitiveContext():
        try:
            return await step()
        finally:
            await release_db_connection()
