"""The database half of "audit tables are append-only" (STYLE.md habit 6), for migrations.

PostgreSQL only: a row trigger refuses every UPDATE and DELETE on the table. TRUNCATE (how test
databases are flushed) is a statement the row trigger does not see; production roles get no
TRUNCATE grant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import migrations


def on_postgresql(statements: list[str]) -> Callable[[Any, Any], None]:
    """A RunPython function executing raw PostgreSQL `statements`."""

    def run(apps: Any, schema_editor: Any) -> None:
        for sql in statements:
            schema_editor.execute(sql, params=None)  # None: no %-placeholder processing

    run.sql_statements = statements  # type: ignore[attr-defined]  # the migration linter reads them as SQL
    return run


# The one sanctioned way past an expirable table's trigger: the retention job's batch transactions
# set it locally (`SELECT set_config('openwop.retention_expiry', 'on', true)`: it ends with the
# transaction); every other UPDATE or DELETE is refused.
RETENTION_EXPIRY_SETTING = "openwop.retention_expiry"


def refuse_change_function(table: str, *, expirable: bool = False) -> str:
    """The trigger function refusing UPDATE and DELETE on `table` (`expirable`: a DELETE passes
    inside a transaction that set RETENTION_EXPIRY_SETTING)."""
    bypass = (
        f"""
            IF TG_OP = 'DELETE' AND current_setting('{RETENTION_EXPIRY_SETTING}', true) = 'on' THEN
                RETURN OLD;
            END IF;"""
        if expirable
        else ""
    )
    return f"""
        CREATE OR REPLACE FUNCTION {table}_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN{bypass}
            RAISE EXCEPTION '{table} is append-only: % refused', TG_OP
                USING ERRCODE = 'insufficient_privilege';
        END;
        $$
        """


def append_only_trigger(table: str) -> migrations.RunPython:
    """A reversible migration operation installing the refusing trigger on `table`."""
    function = f"{table}_refuse_change"
    trigger = f"{table}_append_only"
    install = [
        refuse_change_function(table),
        f"DROP TRIGGER IF EXISTS {trigger} ON {table}",
        f"CREATE TRIGGER {trigger} BEFORE UPDATE OR DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION {function}()",
    ]
    uninstall = [f"DROP TRIGGER IF EXISTS {trigger} ON {table}", f"DROP FUNCTION IF EXISTS {function}()"]
    return migrations.RunPython(on_postgresql(install), on_postgresql(uninstall), elidable=False)
