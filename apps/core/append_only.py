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

    return run


def append_only_trigger(table: str) -> migrations.RunPython:
    """A reversible migration operation installing the refusing trigger on `table`."""
    function = f"{table}_refuse_change"
    trigger = f"{table}_append_only"
    install = [
        f"""
        CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION '{table} is append-only: % refused', TG_OP
                USING ERRCODE = 'insufficient_privilege';
        END;
        $$
        """,
        f"DROP TRIGGER IF EXISTS {trigger} ON {table}",
        f"CREATE TRIGGER {trigger} BEFORE UPDATE OR DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION {function}()",
    ]
    uninstall = [f"DROP TRIGGER IF EXISTS {trigger} ON {table}", f"DROP FUNCTION IF EXISTS {function}()"]
    return migrations.RunPython(on_postgresql(install), on_postgresql(uninstall), elidable=False)
