"""Agent changes are an audit trail: on PostgreSQL a trigger refuses every UPDATE and DELETE
(the same rule and reasons as audit 0002: SQLite gets no trigger, TRUNCATE stays for test flushes)."""

from django.db import migrations

INSTALL = [
    """
    CREATE FUNCTION agents_agentchange_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'agents_agentchange is append-only: % refused', TG_OP
            USING ERRCODE = 'insufficient_privilege';
    END;
    $$
    """,
    """
    CREATE TRIGGER agents_agentchange_append_only
        BEFORE UPDATE OR DELETE ON agents_agentchange
        FOR EACH ROW EXECUTE FUNCTION agents_agentchange_refuse_change()
    """,
]

UNINSTALL = [
    "DROP TRIGGER IF EXISTS agents_agentchange_append_only ON agents_agentchange",
    "DROP FUNCTION IF EXISTS agents_agentchange_refuse_change()",
]


def _run_on_postgresql(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for sql in statements:
            schema_editor.execute(sql, params=None)  # None: no %-placeholder processing

    return run


class Migration(migrations.Migration):
    dependencies = [("agents", "0002_agent_inventory")]

    operations = [migrations.RunPython(_run_on_postgresql(INSTALL), _run_on_postgresql(UNINSTALL))]
