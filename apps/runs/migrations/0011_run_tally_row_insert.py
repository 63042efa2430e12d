"""A new run reaches the tally through a row trigger (session 13), no longer a statement trigger.

Every run the doors create is a one-row INSERT, and the statement trigger of 0007 paid for a
transition table and a grouped, ten-aggregate upsert on each: 76 us of PostgreSQL time per run
(pg_stat_user_functions under the MCP tools/call bench), a tenth of what a run's insert costs the
server. The row trigger upserts the one row it was given: the same tally row of the backend's
shard, the same columns. DELETE keeps its statement trigger (retention deletes runs in batches).
"""

from django.db import migrations

from apps.core.append_only import on_postgresql

_STATUSES = [
    "pending", "running", "waiting-approval", "waiting-input", "waiting-external",
    "cancelling", "completed", "failed", "cancelled",
]  # fmt: skip
_COLUMNS = [status.replace("-", "_") for status in _STATUSES]
_ALL = ", ".join(_COLUMNS)
_ADD_EXCLUDED = ", ".join(f"{c} = runs_runtally.{c} + EXCLUDED.{c}" for c in _COLUMNS)
_IS = ", ".join(f"(NEW.status = '{s}')::int" for s in _STATUSES)

_INSTALL = [
    f"""
    CREATE OR REPLACE FUNCTION runs_run_tally_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO runs_runtally (tenant_id, shard, runs, {_ALL})
        VALUES (NEW.tenant_id, pg_backend_pid() % 64, 1, {_IS})
        ON CONFLICT (tenant_id, shard) DO UPDATE SET runs = runs_runtally.runs + 1, {_ADD_EXCLUDED};
        RETURN NULL;
    END;
    $$
    """,
    "DROP TRIGGER IF EXISTS runs_run_tally_added ON runs_run",
    "CREATE TRIGGER runs_run_tally_added AFTER INSERT ON runs_run FOR EACH ROW "
    "EXECUTE FUNCTION runs_run_tally_inserted()",
]
# Back to 0007's statement trigger (its function is still there).
_UNINSTALL = [
    "DROP TRIGGER IF EXISTS runs_run_tally_added ON runs_run",
    "CREATE TRIGGER runs_run_tally_added AFTER INSERT ON runs_run REFERENCING NEW TABLE AS runs_added "
    "FOR EACH STATEMENT EXECUTE FUNCTION runs_run_tally_added()",
    "DROP FUNCTION IF EXISTS runs_run_tally_inserted()",
]


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_fewer_run_indexes"),
    ]

    operations = [
        migrations.RunPython(on_postgresql(_INSTALL), on_postgresql(_UNINSTALL), elidable=False),
    ]
