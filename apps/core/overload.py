"""Telling a host that cannot reach its database right now from a broken one.

When every pooled database connection is busy for longer than `DATABASE_POOL_TIMEOUT`, when no
new connection can be opened (the server is down, restarting, or has no slot left), or when the
connection a request held is lost (the server was killed or restarted under it), the request failed
because the host cannot reach its database right now, not because anything is wrong with the
request: the answer is 503 with Retry-After in the door's own wire (apps/core/request_limits.py
renders it, for every door; apps/core/unavailable.py for Django's pages), never a 500.

The decision is by the driver's error class and SQLSTATE, never by message text (which changes
between psycopg and libpq releases): psycopg raises OperationalError without a SQLSTATE only when
the client side failed (no connection, or a connection lost), and the server says why it refused
with a SQLSTATE of its own.
"""

from __future__ import annotations

import psycopg

# A hint: one second is about how long the pool's queue takes to move at the load that filled it,
# and how long `make run`'s supervisor takes to start a killed embedded server again.
OVERLOAD_RETRY_AFTER_SECONDS = 1

# SQLSTATE classes and codes the server answers when it cannot serve a connection now
# (PostgreSQL's errcodes: class 08 connection exception; operator intervention; slots).
_UNAVAILABLE_CLASSES = frozenset({"08"})
_UNAVAILABLE_STATES = frozenset({
    "53300",  # too_many_connections (and "remaining connection slots are reserved")
    "57P01",  # admin_shutdown: terminated by pg_terminate_backend or a fast shutdown
    "57P02",  # crash_shutdown: another backend crashed, the server is resetting
    "57P03",  # cannot_connect_now: starting up, shutting down, or in recovery
    "57P05",  # idle_session_timeout: the server ended a pooled connection that sat idle
})  # fmt: skip


def _database_unreachable(exc: BaseException) -> bool:
    if not isinstance(exc, psycopg.OperationalError) or isinstance(exc, psycopg.errors.PipelineAborted):
        return False  # PipelineAborted: an earlier statement of the same pipeline failed, on a live connection
    state = exc.sqlstate
    # No SQLSTATE: the client could not connect, or lost the connection (psycopg_pool's PoolTimeout,
    # PoolClosed and TooManyRequests are OperationalErrors of this kind too).
    return state is None or state[:2] in _UNAVAILABLE_CLASSES or state in _UNAVAILABLE_STATES


def is_overload(exc: BaseException) -> bool:
    """Is `exc` (or what caused it: Django wraps the driver's error) the database being out of
    reach: the pool timing out, a connection that could not be opened, or one that was lost?
    A query that fails on a live connection (a constraint, a syntax error) is not."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _database_unreachable(current):
            return True
        current = current.__cause__ or current.__context__
    return False
