"""runs 0010 on a database that has not run it: its indexes are built and dropped CONCURRENTLY
(outside a transaction), and the schema it leaves is exactly the one Django's own operations
(its `state_operations`) leave; unapplied, it gives 0009's schema back."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, migrations
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

MODULE = importlib.import_module("apps.runs.migrations.0010_fewer_run_indexes")
BEFORE = ("runs", "0009_run_transport_labels")


def _schema() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index AS i"
            " WHERE i.indrelid IN ('runs_run'::regclass, 'runs_runevent'::regclass) ORDER BY 1"
        )
        indexes = cursor.fetchall()
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid), condeferrable, condeferred"
            " FROM pg_constraint WHERE conrelid IN ('runs_run'::regclass, 'runs_runevent'::regclass) ORDER BY 1, 2"
        )
        return indexes, cursor.fetchall()


def test_the_concurrent_path_leaves_djangos_schema_and_reverses() -> None:
    assert MODULE.Migration.atomic is False
    (operation,) = MODULE.Migration.operations
    assert isinstance(operation, migrations.SeparateDatabaseAndState)
    sql = [op.sql for op in operation.database_operations if isinstance(op.sql, str)]
    assert all("CONCURRENTLY" in s for s in sql if "INDEX" in s and "USING INDEX" not in s and "DO $$" not in s)
    try:
        call_command("migrate", *BEFORE, verbosity=0)
        at_0009 = _schema()
        call_command("migrate", "runs", "0010", verbosity=0)
        concurrent = _schema()
        assert all(valid for _, _, valid in concurrent[0])
        call_command("migrate", *BEFORE, verbosity=0)
        assert _schema() == at_0009  # the reverse path rebuilds what 0009 had

        # Django's own operations, as the original migration ran them (in one transaction).
        executor = MigrationExecutor(connection)
        original = type("Migration", (migrations.Migration,), {"operations": list(operation.state_operations)})
        executor.apply_migration(
            executor.loader.project_state(BEFORE, at_end=True), original("0010_fewer_run_indexes", "runs")
        )
        assert _schema() == concurrent
    finally:
        call_command("migrate", verbosity=0)
