"""Behind a transaction pooler (OPENWOP_DB_TRANSACTION_POOLER) retention's session lock is taken on a
direct connection of its own, never on Django's pooled one, where it would stay on whichever server
connection ran it and refuse every later pass (issue 51 item 5)."""

from __future__ import annotations

from io import StringIO
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from apps.core.async_db import conninfo
from apps.retention import services
from apps.retention.services import APPLY_LOCK_KEY
from apps.tenants.models import Tenant

pytestmark = pytest.mark.django_db

HOLDERS_SQL = (
    "SELECT l.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted AND ((l.classid::bigint << 32) | l.objid::bigint) = %s"
)


def test_behind_a_pooler_the_pass_holds_its_lock_on_a_direct_connection(
    tenant: Tenant, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.OPENWOP_DB_TRANSACTION_POOLER = True
    settings.OPENWOP_DATABASE_DIRECT = dict(connection.settings_dict)  # this test's database, directly
    key = APPLY_LOCK_KEY & 0xFFFFFFFFFFFFFFFF  # pg_locks shows the bigint's two halves unsigned
    seen: list[tuple[int, str]] = []
    records_pass = services._records_pass

    def watching(*args: Any, **kwargs: Any) -> None:
        with connection.cursor() as cursor:
            cursor.execute(HOLDERS_SQL, [key])
            seen.extend(cursor.fetchall())
            cursor.execute("SELECT pg_backend_pid()")
            seen.append(("django", cursor.fetchone()[0]))  # type: ignore[arg-type]
        records_pass(*args, **kwargs)

    monkeypatch.setattr(services, "_records_pass", watching)
    call_command("retention", "apply", stdout=StringIO())
    (holder_pid, holder_name), (_, django_pid) = seen
    assert holder_name == "openwop-retention-lock" and holder_pid != django_pid
    with connection.cursor() as cursor:  # released with the pass
        cursor.execute(HOLDERS_SQL, [key])
        assert cursor.fetchall() == []

    with psycopg.connect(conninfo(), autocommit=True) as other:  # another pass, under way
        other.execute("SELECT pg_advisory_lock(%s)", [APPLY_LOCK_KEY])
        with pytest.raises(CommandError, match="another retention pass is under way"):
            call_command("retention", "apply", stdout=StringIO())
        other.execute("SELECT pg_advisory_unlock(%s)", [APPLY_LOCK_KEY])
