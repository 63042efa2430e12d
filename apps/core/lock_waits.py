"""What a PostgreSQL backend is waiting on, told without a query's text: the lock it asked for and
the backends that hold it up (`pg_blocking_pids`), each by its pid, application name, state and
how long its transaction has run.

Used while something waits (a group-commit flush, a `migrate` statement under its `lock_timeout`),
from a connection of its own: the waiting one is busy. pg_stat_activity's `query` is never read:
its text can carry a caller's values (parameters are inlined by some clients); the application
name and state say whose it is, which is what an operator acts on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

LOCK_WAITS_SQL = """
SELECT w.locktype, w.mode, CASE WHEN w.relation IS NULL THEN NULL ELSE w.relation::regclass::text END,
       b.pid, b.application_name, b.state, b.backend_type, clock_timestamp() - b.xact_start
  FROM pg_locks AS w
  CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS blocker(pid)
  JOIN pg_stat_activity AS b ON b.pid = blocker.pid
 WHERE w.pid = %s AND NOT w.granted
 ORDER BY b.xact_start NULLS LAST, b.pid
"""

# Who holds a lock on a table now (a migration that gave up asks, to name who to wait for).
TABLE_HOLDERS_SQL = """
SELECT DISTINCT l.mode, a.pid, a.application_name, a.state, a.backend_type, clock_timestamp() - a.xact_start
  FROM pg_locks AS l
  JOIN pg_stat_activity AS a ON a.pid = l.pid
 WHERE l.locktype = 'relation' AND l.granted AND l.relation = to_regclass(%s) AND l.pid <> pg_backend_pid()
 ORDER BY 6 DESC NULLS LAST, a.pid
"""


@dataclass(frozen=True, slots=True)
class Blocker:
    """A backend that holds up a lock request (or holds a lock on a table)."""

    pid: int
    application_name: str
    state: str | None  # 'active', 'idle in transaction', ...; None for a background worker
    backend_type: str
    transaction_age: timedelta | None

    def describe(self) -> str:
        age = self.transaction_age
        since = "" if age is None else f", in a transaction for {age.total_seconds():.1f} s"
        # repr: an application name is whatever its client chose; quoted and escaped for a log line.
        name = self.application_name
        return f"pid {self.pid} (application_name {name!r}, {self.backend_type}, state {self.state!r}{since})"


@dataclass(frozen=True, slots=True)
class LockWait:
    """One lock a backend has asked for and not been granted, and who holds it up."""

    locktype: str  # 'relation', 'transactionid', 'tuple', 'virtualxid', ...
    mode: str  # e.g. 'RowExclusiveLock'
    relation: str | None  # the table or index, when the lock is on one
    blockers: tuple[Blocker, ...]

    def describe(self) -> str:
        what = f"{self.mode} on {self.relation}" if self.relation else f"{self.mode} ({self.locktype})"
        held = "; ".join(blocker.describe() for blocker in self.blockers) or "nobody (granted since)"
        return f"{what}, held up by {held}"


def lock_waits_from_rows(rows: list[tuple[Any, ...]]) -> list[LockWait]:
    """`LOCK_WAITS_SQL`'s rows grouped by lock request."""
    grouped: dict[tuple[str, str, str | None], list[Blocker]] = {}
    for locktype, mode, relation, pid, application_name, state, backend_type, age in rows:
        grouped.setdefault((locktype, mode, relation), []).append(
            Blocker(pid=pid, application_name=application_name or "", state=state, backend_type=backend_type,
                    transaction_age=age)
        )  # fmt: skip
    return [LockWait(locktype=k[0], mode=k[1], relation=k[2], blockers=tuple(v)) for k, v in grouped.items()]


def lock_waits_of(cursor: Any, *, pid: int) -> list[LockWait]:
    """What backend `pid` waits on now, read on `cursor` (a DB-API cursor of another connection)."""
    cursor.execute(LOCK_WAITS_SQL, [pid])
    return lock_waits_from_rows(list(cursor.fetchall()))


def table_holders(cursor: Any, *, table: str) -> list[tuple[str, Blocker]]:
    """(lock mode, backend) of every other backend holding a lock on `table` now."""
    cursor.execute(TABLE_HOLDERS_SQL, [table])
    return [
        (mode, Blocker(pid=pid, application_name=name or "", state=state, backend_type=kind, transaction_age=age))
        for mode, pid, name, state, kind, age in cursor.fetchall()
    ]


def describe_waits(waits: list[LockWait]) -> str:
    return "; ".join(wait.describe() for wait in waits) or "no lock (on the network, the disk or the CPU)"
