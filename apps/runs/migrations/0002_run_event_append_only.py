"""The run event log is append-only in the database too (STYLE.md habit 6).

PostgreSQL only: a row trigger refuses UPDATE and DELETE on runs_runevent. TRUNCATE (test database
flushes) is a statement the trigger does not see. SQLite keeps the rule in code alone: its test
flush deletes rows one by one, which a trigger would refuse.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION runs_runevent_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION USING MESSAGE = 'runs_runevent is append-only: ' || TG_OP || ' refused',
        ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS runs_runevent_append_only ON runs_runevent;
CREATE TRIGGER runs_runevent_append_only BEFORE UPDATE OR DELETE ON runs_runevent
    FOR EACH ROW EXECUTE FUNCTION runs_runevent_append_only();
"""

DROP = """
DROP TRIGGER IF EXISTS runs_runevent_append_only ON runs_runevent;
DROP FUNCTION IF EXISTS runs_runevent_append_only();
"""


def _on_postgresql(sql: str):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]

    operations = [migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP), elidable=False)]
