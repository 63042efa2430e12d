"""Database connections of async code that outlives its request's thread.

Django binds a database connection to the thread that used it, and under ASGI a request's
`sync_to_async` calls share one thread per request (asgiref's `ThreadSensitiveContext`). Two
things follow, both measured (bench/README.md, "MCP tools/call at c = 16"):

- A request that awaits something long keeps that thread's connection checked out for the
  whole wait unless it hands it back: with a pool of 8, the 9th concurrent waiter waited 10 s for
  a connection and answered 500 (`PoolTimeout`).
- Work started in a fresh `contextvars.Context` (to outlive the view) has no request context, so
  asgiref runs all of it, for every request of the process, on ONE shared thread: one connection,
  every waiting request's reads in a single queue. The door (apps/doors/asgi.py) therefore keeps
  each request's context until its answer, streamed or not, is sent, and work a view detaches
  shares it.

`release_db_connection` hands the calling context's connection back (to the pool, or closed).
"""

from __future__ import annotations

from asgiref.sync import SyncToAsync, sync_to_async
from django.db import connection


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
