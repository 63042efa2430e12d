"""/readyz tells the truth while the doors are blocked: `SELECT 1` answers, but a record write
would wait on a lock (a migration's ACCESS EXCLUSIVE on the record table, its partition or the
streams' counters), so the write path fails, within the check's deadline, writing nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.test import AsyncClient
from django.utils import timezone

from apps.audit.models import HostEvent
from apps.audit.partitions import DEFAULT, partitions, records_partitions_ensure
from apps.core.heartbeats import worker_heartbeat_beat
from apps.core.readiness import readiness_failures

pytestmark = pytest.mark.django_db(transaction=True)


class _Holder:
    def __init__(self, lock: str) -> None:
        wrapper = connections.create_connection("default")
        wrapper.ensure_connection()
        self.raw = wrapper.connection
        self.raw.execute("BEGIN")
        self.raw.execute(lock)

    def close(self) -> None:
        self.raw.execute("ROLLBACK")
        self.raw.close()
        connection.close()  # sync_to_async's thread: its own connection, which nothing else would close


@pytest.fixture(autouse=True)
def live_worker_heartbeat(transactional_db: None, settings: Any) -> None:
    """A worker heartbeats for the runs' queue (committed), so only the write path can fail here."""
    worker_heartbeat_beat(worker="celery@write-path-test/1", queues=[settings.CELERY_TASK_DEFAULT_QUEUE])


@pytest.fixture
def current_partition() -> Iterator[str]:
    records_partitions_ensure(timezone.now())
    now = timezone.now()
    yield next((p.name for p in partitions() if p.lower <= now < p.upper), DEFAULT)


def _records() -> int:
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {HostEvent._meta.db_table}")
            return int(cursor.fetchone()[0])
    finally:
        connection.close()  # this runs on sync_to_async's thread, which nothing else would close


async def test_ready_when_the_record_write_can_lock(current_partition: str) -> None:
    assert await readiness_failures() == []


@pytest.mark.parametrize("table", ["audit_hostevent", "partition", "audit_hosteventstream"])
async def test_a_blocked_record_write_is_not_ready(current_partition: str, table: str) -> None:
    target = current_partition if table == "partition" else table
    only = "ONLY " if table == "audit_hostevent" else ""
    before = await sync_to_async(_records)()
    holder = await sync_to_async(_Holder)(f"LOCK TABLE {only}{target} IN ACCESS EXCLUSIVE MODE")
    try:
        assert await readiness_failures(timeout=0.5) == ["write-path"]  # the database itself answers
        response = await AsyncClient().get("/readyz")
        assert response.status_code == 503 and response.json()["failing"] == ["write-path"]
    finally:
        await sync_to_async(holder.close)()
    assert await sync_to_async(_records)() == before  # the probe wrote nothing
    assert await readiness_failures() == []
