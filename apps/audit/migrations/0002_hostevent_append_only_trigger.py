"""Host events are an audit log: on PostgreSQL a trigger refuses every UPDATE and DELETE.

SQLite gets no trigger: it is the zero-setup default, and its test databases are flushed with
DELETE. TRUNCATE stays allowed on PostgreSQL because test databases are flushed with it; production
roles get no TRUNCATE grant (deployment concern, STYLE.md habit 6).
"""

from django.db import migrations

INSTALL = [
    """
    CREATE FUNCTION audit_hostevent_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'audit_hostevent is append-only: % refused', TG_OP
            USING ERRCODE = 'insufficient_privilege';
    END;
    $$
    """,
    """
    CREATE TRIGGER audit_hostevent_append_only
        BEFORE UPDATE OR DELETE ON audit_hostevent
        FOR EACH ROW EXECUTE FUNCTION audit_hostevent_refuse_change()
    """,
]

UNINSTALL = [
    "DROP TRIGGER IF EXISTS audit_hostevent_append_only ON audit_hostevent",
    "DROP FUNCTION IF EXISTS audit_hostevent_refuse_change()",
]


def _run_on_postgresql(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for sql in statements:
            schema_editor.execute(sql, params=None)  # None: no %-placeholder processing

    return run


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [migrations.RunPython(_run_on_postgresql(INSTALL), _run_on_postgresql(UNINSTALL))]
