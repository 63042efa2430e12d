"""Telling an overloaded host from a broken one.

When every pooled database connection is busy for longer than `DATABASE_POOL_TIMEOUT`, or no new
connection can be opened (PostgreSQL has no slot left, or does not answer), the request failed
because the host cannot reach its database right now, not because anything is wrong with the
request: the answer is 503 with Retry-After in the door's own wire (apps/core/request_limits.py
renders it, for every door), never a 500.
"""

from __future__ import annotations

from django.db import OperationalError as DjangoOperationalError

# A hint: one second is about how long the pool's queue takes to move at the load that filled it.
OVERLOAD_RETRY_AFTER_SECONDS = 1

# A failure to open a connection (psycopg 3 prefixes every one with "connection failed"; slot
# refusals named as well, whatever wraps them).
_NO_CONNECTION_MESSAGES = (
    "connection failed",
    "too many clients already",
    "remaining connection slots are reserved",
    "too many connections for role",
)


def is_overload(exc: BaseException) -> bool:
    """Is `exc` (or what caused it) the pool timing out or a database connection that could not
    be opened? A query that fails on an open connection is not: that stays an internal error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ == "PoolTimeout" and type(current).__module__.startswith("psycopg_pool"):
            return True
        if isinstance(current, DjangoOperationalError) or type(current).__module__.startswith("psycopg"):
            text = str(current)
            if any(message in text for message in _NO_CONNECTION_MESSAGES):
                return True
        current = current.__cause__ or current.__context__
    return False
