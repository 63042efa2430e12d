"""`migrate` under a lock timeout (apps/core/migration_locks.py): a migration never keeps the doors
waiting behind its lock request longer than OPENWOP_MIGRATE_LOCK_TIMEOUT; it is retried, then fails
naming the table and who held it; CONCURRENTLY statements are left to wait."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command, get_commands
from django.db import connection, connections, migrations
from django.db.migrations.state import ProjectState

from apps.core.migration_locks import LockTimeoutExecutor, MigrationLockTimeout

pytestmark = pytest.mark.django_db(transaction=True)

TARGET = "lockprobe_target"
HOLDER_NAME = "lock-holder-test"


@pytest.fixture
def target(settings: Any) -> Iterator[None]:
    settings.OPENWOP_MIGRATE_LOCK_TIMEOUT = 0.3
    settings.OPENWOP_MIGRATE_LOCK_RETRIES = 2
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {TARGET} (id int)")
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {TARGET}, lockprobe_new")
        cursor.execute("DELETE FROM django_migrations WHERE app = 'lockprobe'")


class Holder:
    """Another backend holding a lock on the target in an open transaction (a door, a report)."""

    def __init__(self, lock: str) -> None:
        self.wrapper = connections.create_connection("default")
        self.wrapper.ensure_connection()
        self.raw = self.wrapper.connection
        self.raw.execute(f"SET application_name = '{HOLDER_NAME}'")
        self.raw.execute("BEGIN")
        self.raw.execute(lock)

    def release(self) -> None:
        self.raw.execute("COMMIT")

    def close(self) -> None:
        self.raw.close()


def _migration(*operations: Any, atomic: bool = True) -> migrations.Migration:
    cls = type("Migration", (migrations.Migration,), {"operations": list(operations), "atomic": atomic})
    return cls("0001_probe", "lockprobe")


def _columns(table: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY 1", [table])
        return [row[0] for row in cursor.fetchall()]


def _recorded() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_migrations WHERE app = 'lockprobe'")
        return cursor.fetchone()[0] == 1


def _executor(pause: Any) -> LockTimeoutExecutor:
    executor = LockTimeoutExecutor(connection)
    executor.pause = pause  # type: ignore[method-assign]
    executor.guard.pause = pause
    return executor


ADD_COLUMN = migrations.RunSQL(f"ALTER TABLE {TARGET} ADD COLUMN x int", f"ALTER TABLE {TARGET} DROP COLUMN x")


def test_a_migration_that_cannot_lock_fails_naming_the_table_and_the_holder(target: None) -> None:
    holder = Holder(f"LOCK TABLE {TARGET} IN ACCESS SHARE MODE")  # a long read is enough to block ALTER
    pauses: list[int] = []
    try:
        with pytest.raises(MigrationLockTimeout) as failed:
            _executor(pauses.append).apply_migration(ProjectState(), _migration(ADD_COLUMN))
    finally:
        holder.close()
    message = str(failed.value)
    assert "lockprobe.0001_probe" in message and f"table {TARGET}" in message
    assert "AccessExclusiveLock" in message and HOLDER_NAME in message and "idle in transaction" in message
    assert "Nothing of this migration was applied" in message
    assert pauses == [1, 2]  # tried 1 + OPENWOP_MIGRATE_LOCK_RETRIES times
    assert _columns(TARGET) == ["id"] and not _recorded()
    with connection.cursor() as cursor:  # the session is not left with the command's timeout
        cursor.execute("SHOW application_name")
        assert cursor.fetchone()[0] == "openwop-migrate"  # the executor's own; the command resets it


def test_a_migration_retried_after_its_blocker_went_applies(target: None) -> None:
    holder = Holder(f"LOCK TABLE {TARGET} IN ACCESS SHARE MODE")
    try:
        _executor(lambda attempt: holder.release()).apply_migration(ProjectState(), _migration(ADD_COLUMN))
    finally:
        holder.close()
    assert _columns(TARGET) == ["id", "x"] and _recorded()


def test_outside_a_transaction_only_the_statement_that_timed_out_is_retried(target: None) -> None:
    holder = Holder(f"LOCK TABLE {TARGET} IN ACCESS SHARE MODE")
    create = migrations.RunSQL("CREATE TABLE lockprobe_new (id int)", "DROP TABLE lockprobe_new")
    try:  # a second CREATE TABLE would fail: the first statement is not run again
        _executor(lambda attempt: holder.release()).apply_migration(
            ProjectState(), _migration(create, ADD_COLUMN, atomic=False)
        )
    finally:
        holder.close()
    assert _columns("lockprobe_new") == ["id"] and _columns(TARGET) == ["id", "x"] and _recorded()


def test_a_concurrent_index_build_waits_for_older_transactions_without_timing_out(target: None) -> None:
    # A writer's open transaction: CREATE INDEX CONCURRENTLY waits for it to end (it blocks no one).
    holder = Holder(f"INSERT INTO {TARGET} VALUES (1)")
    threading.Timer(1.0, holder.release).start()  # past the 0.3 s lock timeout
    build = migrations.RunSQL(
        f"CREATE INDEX CONCURRENTLY lockprobe_target_id ON {TARGET} (id)", "DROP INDEX CONCURRENTLY lockprobe_target_id"
    )
    try:
        _executor(lambda attempt: pytest.fail("a concurrent build is never retried")).apply_migration(
            ProjectState(), _migration(build, atomic=False)
        )
    finally:
        holder.close()
    with connection.cursor() as cursor:
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = 'lockprobe_target_id'::regclass")
        assert cursor.fetchone() == (True,)
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "300ms"  # given back after the build


def test_the_migrate_command_is_this_one_and_gives_the_session_back() -> None:
    assert get_commands()["migrate"] == "apps.core"
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"
        cursor.execute("SHOW application_name")
        assert cursor.fetchone()[0] != "openwop-migrate"
