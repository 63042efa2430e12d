"""A group-commit flush that waits says so while it waits (apps/core/group_commit.py): after
OPENWOP_FLUSH_WAIT_LOG_SECONDS a warning names the lock its backend waits on and the backend
holding it up (application name and state, never a query's text), and the record still commits
once the lock goes."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from django.db import connection

from apps.audit.group_commit import host_event_append_batched
from apps.audit.host_event_types import NEGOTIATION_DECIDED
from apps.core.async_db import conninfo
from tests.audit.test_host_event_group_commit import _on_fresh_loop, _sequences

pytestmark = pytest.mark.django_db(transaction=True)

HOLDER = "lock-holder-test"
SECRET_QUERY_TEXT = "holder-query-text-9d2f"


def test_a_waiting_flush_is_logged_while_it_waits_with_what_it_waits_on(
    make_subject: Any, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.OPENWOP_FLUSH_WAIT_LOG_SECONDS = 0.3
    alice = make_subject("acme")[1]
    connection.close()  # the test's own connection; the loop's pool has its own

    def waiting_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if "has waited" in r.getMessage()]

    async def scenario() -> list[str]:
        async with await psycopg.AsyncConnection.connect(conninfo(), application_name=HOLDER) as locker:
            await locker.execute(f"SELECT '{SECRET_QUERY_TEXT}'")
            await locker.execute("LOCK TABLE ONLY audit_hostevent IN ACCESS EXCLUSIVE MODE")  # a migration's
            write = asyncio.ensure_future(
                host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload={"i": 1})
            )
            for _ in range(200):  # the lock is held until the warning is out: it came while waiting
                if waiting_lines():
                    break
                await asyncio.sleep(0.05)
            seen = waiting_lines()
            await locker.commit()
            await write
            return seen

    with caplog.at_level("WARNING", logger="apps.core.group_commit"):
        seen, _ = _on_fresh_loop(scenario)
    assert seen, "no warning while the flush waited"
    line = seen[0]
    assert "host-event group commit: a flush of 1 items has waited" in line
    assert "RowExclusiveLock on audit_hostevent" in line
    assert f"application_name '{HOLDER}'" in line and "state 'idle in transaction'" in line
    assert SECRET_QUERY_TEXT not in caplog.text
    assert _sequences(alice) == [1]
