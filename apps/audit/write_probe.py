"""The record write's readiness probe (apps.core.readiness.check_write_path): every A2A and MCP
exchange writes a record before it answers, so a door whose record write would wait on a lock is
not ready, even though `SELECT 1` answers.

The probe takes the locks a record write takes, in the order it takes them, and writes nothing:
an INSERT that selects no row locks its table (ROW EXCLUSIVE, at parse time) and fires its
statement triggers, whose rollup upserts lock theirs, exactly as a real append does, with zero
rows; the same for the partition a record of now goes to, and for the streams' counters the
append updates. A migration's ACCESS EXCLUSIVE, a table rewrite or a partition's DETACH on any of
them makes the probe wait, up to the check's lock timeout. It needs no privilege the writers lack
(INSERT and UPDATE; LOCK TABLE's ROW EXCLUSIVE needs UPDATE, DELETE or TRUNCATE before PostgreSQL
16), and the transaction is rolled back.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from apps.audit.models import HostEvent, HostEventStream
from apps.audit.partitions import DEFAULT, partitions

_RECORDS = HostEvent._meta.db_table
_STREAMS = HostEventStream._meta.db_table


def record_write_probe(cursor: Any) -> None:
    now = timezone.now()
    target = next((p.name for p in partitions() if p.lower <= now < p.upper), DEFAULT)
    cursor.execute(f"UPDATE {_STREAMS} SET last_sequence = last_sequence WHERE false")  # noqa: S608
    cursor.execute(f"INSERT INTO {_RECORDS} (event_id) SELECT NULL WHERE false")
    cursor.execute(f"INSERT INTO {target} (event_id) SELECT NULL WHERE false")
