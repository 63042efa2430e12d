"""A2A ListTasks' totalSize without counting the tenant's rows (bench/README.md §ListTasks scaling).

RunTally is kept by two statement triggers on runs_run: each
INSERT / DELETE statement adds its per-tenant row counts, read from its transition table, to the
tally row of the backend's shard, in the statement's own transaction. Installing them takes a lock
that waits for every open run-writing transaction and blocks new ones until this migration
commits, then counts the runs already there: no run is counted twice or missed.
"""

import django.db.models.deletion
import django.db.models.manager
from django.db import migrations, models

from apps.core.append_only import on_postgresql

# The shard is pg_backend_pid() % 64: apps.runs.models.RUN_TALLY_SHARDS when this was written.

_INSTALL = [
    "LOCK TABLE runs_run IN SHARE ROW EXCLUSIVE MODE",
    """
    CREATE OR REPLACE FUNCTION runs_run_tally_added() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO runs_runtally (tenant_id, shard, runs)
        SELECT tenant_id, pg_backend_pid() % 64, count(*) FROM runs_added GROUP BY tenant_id
        ON CONFLICT (tenant_id, shard) DO UPDATE SET runs = runs_runtally.runs + EXCLUDED.runs;
        RETURN NULL;
    END;
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION runs_run_tally_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO runs_runtally (tenant_id, shard, runs)
        SELECT tenant_id, pg_backend_pid() % 64, -count(*) FROM runs_deleted GROUP BY tenant_id
        ON CONFLICT (tenant_id, shard) DO UPDATE SET runs = runs_runtally.runs + EXCLUDED.runs;
        RETURN NULL;
    END;
    $$
    """,
    "DROP TRIGGER IF EXISTS runs_run_tally_added ON runs_run",
    "DROP TRIGGER IF EXISTS runs_run_tally_deleted ON runs_run",
    "CREATE TRIGGER runs_run_tally_added AFTER INSERT ON runs_run REFERENCING NEW TABLE AS runs_added "
    "FOR EACH STATEMENT EXECUTE FUNCTION runs_run_tally_added()",
    "CREATE TRIGGER runs_run_tally_deleted AFTER DELETE ON runs_run REFERENCING OLD TABLE AS runs_deleted "
    "FOR EACH STATEMENT EXECUTE FUNCTION runs_run_tally_deleted()",
    "DELETE FROM runs_runtally",
    "INSERT INTO runs_runtally (tenant_id, shard, runs) SELECT tenant_id, 0, count(*) FROM runs_run GROUP BY tenant_id",
]
_UNINSTALL = [
    "DROP TRIGGER IF EXISTS runs_run_tally_added ON runs_run",
    "DROP TRIGGER IF EXISTS runs_run_tally_deleted ON runs_run",
    "DROP FUNCTION IF EXISTS runs_run_tally_added()",
    "DROP FUNCTION IF EXISTS runs_run_tally_deleted()",
]


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0003_agentchange_append_only_trigger"),
        ("runs", "0005_run_list_status_newest"),
        ("tenants", "0002_operator_auditor_groups"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunTally",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("shard", models.PositiveSmallIntegerField()),
                (
                    "runs",
                    models.BigIntegerField(default=0, help_text="Runs added minus runs deleted through this shard."),
                ),
            ],
            options={
                "abstract": False,
                "base_manager_name": "unscoped_all_tenants",
                "default_manager_name": "unscoped_all_tenants",
            },
            managers=[
                ("unscoped_all_tenants", django.db.models.manager.Manager()),
            ],
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["tenant", "status", "-updated_at", "-id"], name="run_list_by_status"),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["tenant", "context_id"], name="run_list_by_context"),
        ),
        migrations.AddField(
            model_name="runtally",
            name="tenant",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="tenants.tenant",
            ),
        ),
        migrations.AddConstraint(
            model_name="runtally",
            constraint=models.UniqueConstraint(fields=("tenant", "shard"), name="run_tally_shard_unique"),
        ),
        migrations.RunPython(on_postgresql(_INSTALL), on_postgresql(_UNINSTALL), elidable=False),
    ]
