"""PostgreSQL for async code without Django's ORM: one psycopg async pool per event loop.

The protocol doors serve their hot reads and writes from the event loop itself: no thread hop, no
ORM query compilation (DESIGN.md §The hot path). This module owns the pool they share, and
`fetch` / `fetch_sync`, which run one statement on it or on Django's connection: a read's one SQL
text serves async and sync callers alike (apps/runs/reads.py).

A pool belongs to the loop that opened it (psycopg's async connections are bound to one loop), so
there is one per running loop: the server's single loop in production, one per test in the suite.
Connections are in autocommit mode; a caller that writes opens its own transaction
(`async with conn.transaction()`).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
from asgiref.sync import AsyncToSync, sync_to_async
from django.conf import settings
from django.db import connection
from psycopg import AsyncConnection, AsyncCursor
from psycopg.pq import ExecStatus
from psycopg_pool import AsyncConnectionPool

_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncConnectionPool] = weakref.WeakKeyDictionary()
# One gate per pool, as wide as the pool: callers beyond its size queue here, on a plain semaphore,
# and never inside psycopg_pool, whose queued client costs a task and a timer each (`wait_for`).
_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
_opening: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


class _CountedCursor(AsyncCursor[Any]):
    """Counts the statements the doors send (tests pin how many a request costs)."""

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        _counts["statements"] += 1
        return await super().execute(*args, **kwargs)

    async def executemany(self, *args: Any, **kwargs: Any) -> None:
        _counts["statements"] += 1
        await super().executemany(*args, **kwargs)


_counts = {"statements": 0}


def statements_executed() -> int:
    """How many statements this process has sent through the doors' pools (BEGIN/COMMIT aside)."""
    return _counts["statements"]


_on_django_connection = {"enabled": False}


def statements_join_django_transaction(enabled: bool) -> None:
    """Test harness only (tests/conftest.py): a `db` test's rows live in a transaction open on
    Django's connection, which no pooled connection can see; while enabled, `fetch` runs there (in
    the request's thread, as the ORM does) and the per-process caches are bypassed. Never enabled
    by the host itself."""
    _on_django_connection["enabled"] = enabled


def joins_django_transaction() -> bool:
    return _on_django_connection["enabled"]


def statements_on_django_connection() -> bool:
    """Whether this loop's statements take Django's connection: in a `db` test (above), or on a
    loop that lives for one call, the one `async_to_sync` makes for an async view served by a sync
    handler (Django's test client, a WSGI server), where a pool would be opened for one request."""
    if _on_django_connection["enabled"]:
        return True
    return asyncio.get_running_loop() in AsyncToSync.loop_thread_executors


def fetch_sync(sql: str, params: Any) -> list[tuple[Any, ...]]:
    """The rows of one statement on Django's connection (a sync caller, inside its transaction)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description is not None else []


async def fetch(sql: str, params: Any) -> list[tuple[Any, ...]]:
    """The rows of one statement on this loop's pool, in its own transaction (autocommit), or on
    Django's connection (`statements_on_django_connection`)."""
    if statements_on_django_connection():
        return await sync_to_async(fetch_sync)(sql, params)
    pool = await async_pool()
    async with _gates[asyncio.get_running_loop()]:
        conn = await pool.getconn()
        try:
            cursor = await conn.execute(sql, params)
            result = cursor.pgresult  # rows or none, without building `description`'s columns
            return await cursor.fetchall() if result is not None and result.status == ExecStatus.TUPLES_OK else []
        finally:
            await pool.putconn(conn)  # autocommit: nothing to commit; a broken one is replaced


@contextlib.asynccontextmanager
async def pooled_connection() -> AsyncIterator[AsyncConnection[Any]]:
    """A connection of this loop's pool, through its gate, for a caller that runs several
    statements (the group commit's flusher); autocommit, as every pooled connection."""
    pool = await async_pool()
    async with _gates[asyncio.get_running_loop()], pool.connection() as conn:
        yield conn


def conninfo(*, direct: bool = False) -> str:
    """The libpq connection string of Django's default database, read when the pool opens (so a
    test run's database, which pytest-django names at setup, is the one used). `direct`: for a
    session that must outlive a transaction (LISTEN, a session advisory lock), PostgreSQL itself
    (DATABASE_DIRECT_URL) when the host sits behind a transaction pooler; else the same database."""
    db: dict[str, Any] = settings.DATABASES["default"]
    if direct and getattr(settings, "OPENWOP_DB_TRANSACTION_POOLER", False):
        db = settings.OPENWOP_DATABASE_DIRECT or db  # settings refuse the pooler without it
    parts = {
        "dbname": db.get("NAME") or "",
        "user": db.get("USER") or "",
        "password": db.get("PASSWORD") or "",
        "host": db.get("HOST") or "",
        "port": str(db.get("PORT") or ""),
    }
    return " ".join(f"{key}={_quoted(value)}" for key, value in parts.items() if value)


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _pool_kwargs() -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True, "cursor_factory": _CountedCursor}
    if getattr(settings, "OPENWOP_DB_TRANSACTION_POOLER", False):
        kwargs["prepare_threshold"] = None  # a transaction pooler: no server-side prepared statements
    return kwargs


@contextlib.contextmanager
def direct_session_lock(key: int, application_name: str) -> Iterator[bool]:
    """`pg_try_advisory_lock(key)` on a connection of its own to PostgreSQL itself (`conninfo(direct=
    True)`), held until the block ends: whether it was taken. A session lock taken through a
    transaction pooler would stay on whichever server connection ran it."""
    with psycopg.connect(conninfo(direct=True), autocommit=True, connect_timeout=5,
                         application_name=application_name) as conn:  # fmt: skip
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
        taken = bool(row and row[0])
        try:
            yield taken
        finally:
            if taken:
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def pool_max_size() -> int:
    return int(getattr(settings, "OPENWOP_ASYNC_POOL_MAX_SIZE", 8))


async def async_pool() -> AsyncConnectionPool:
    """This loop's pool, opened on first use."""
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is not None:
        return pool
    lock = _opening.setdefault(loop, asyncio.Lock())
    async with lock:
        pool = _pools.get(loop)
        if pool is None:
            pool = AsyncConnectionPool(
                conninfo(),
                min_size=1,
                max_size=pool_max_size(),
                timeout=float(getattr(settings, "OPENWOP_ASYNC_POOL_TIMEOUT", 10.0)),
                kwargs=_pool_kwargs(),
                open=False,
                name="openwop-doors",
            )
            await pool.open()
            _gates[loop] = asyncio.Semaphore(pool_max_size())
            _pools[loop] = pool
    return pool


def async_pools_stats() -> list[dict[str, int]]:
    """`get_stats()` of every loop's pool in this process (the metrics' pool gauge)."""
    return [pool.get_stats() for pool in list(_pools.values())]


async def async_pool_close() -> None:
    """Close this loop's pool (server shutdown, a test's teardown)."""
    loop = asyncio.get_running_loop()
    pool = _pools.pop(loop, None)
    _gates.pop(loop, None)
    if pool is not None:
        await pool.close()
