"""The audit app's migrations on a database that serves: the chain migration (0013) goes back and
forth, the one-way partitioning (0010) is refused backwards before anything is undone, and refuses
forwards on a large table unless the doors are stopped."""

from __future__ import annotations

from importlib import import_module
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

pytestmark = pytest.mark.django_db


def _applied() -> set[str]:
    return set(MigrationRecorder.Migration.objects.filter(app="audit").values_list("name", flat=True))


def _triggers() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'audit_hosteventstream'::regclass AND NOT tgisinternal"
        )
        return [row[0] for row in cursor.fetchall()]


def test_migrating_below_the_one_way_partitioning_is_refused_before_anything_is_undone() -> None:
    before = _applied()
    with pytest.raises(CommandError, match=r"audit 0010 .* is one-way"):
        call_command("migrate", "audit", "0009", stdout=StringIO())
    assert _applied() == before  # 0011-0013 still applied: nothing was undone half way
    assert _triggers() == ["audit_hosteventstream_track_head"]


def test_the_chain_head_migration_goes_back_and_forth() -> None:
    call_command("migrate", "audit", "0012", stdout=StringIO())
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM information_schema.columns"
            " WHERE table_name = 'audit_hosteventstream' AND column_name = 'chained_through'"
        )
        assert cursor.fetchone()[0] == 0
    assert _triggers() == []
    call_command("migrate", "audit", stdout=StringIO())
    assert _triggers() == ["audit_hosteventstream_track_head"]


def test_partitioning_a_large_table_is_refused_while_the_doors_may_serve(tenant, settings) -> None:  # type: ignore[no-untyped-def]
    migration = import_module("apps.audit.migrations.0010_hostevent_partitioned")
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO audit_hostevent (tenant_id, subject_id, subject, event_id, type, payload, durable,
                                            sequence, at)
               SELECT %s, 'bulk', '{}'::jsonb, 'evt-bulk-' || lpad(n::text, 12, '0'), 'negotiation.decided',
                      '{}'::jsonb, true, n, now()
               FROM generate_series(1, %s) AS n""",
            [tenant.pk, migration.OFFLINE_ABOVE + 1],
        )
    settings.OPENWOP_MIGRATE_OFFLINE = False

    class Editor:  # what the migration's function reads of the schema editor, before it changes anything
        connection = connection

    with pytest.raises(CommandError, match="Run it with the doors stopped") as refused:
        migration.partition(None, Editor())
    assert "OPENWOP_MIGRATE_OFFLINE=1" in str(refused.value) and "Nothing was changed" in str(refused.value)
