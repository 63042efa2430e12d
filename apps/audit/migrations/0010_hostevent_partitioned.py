"""Partition `audit_hostevent` by RANGE (at) (issue 36 item 2; apps/audit/partitions.py), keeping
its records, constraints, indexes and triggers.

PostgreSQL requires every unique constraint of a partitioned table to include the partition key,
so three change: the primary key is (id, at) (ids still come from one identity sequence, so they
stay unique), the stream's (tenant, subject, sequence) uniqueness becomes (tenant, subject,
sequence, at) (the counter row lock already allocates each sequence once), and `event_id` is
unique with `at` (event ids carry 156 random bits: `apps.core.ids.mint_opaque`). The (tenant) index
is gone: the stream index leads with the tenant. The migrated state says the same.

In one transaction: the table is renamed aside, the partitioned table is created LIKE it (columns,
defaults, CHECKs, identity) with its keys, foreign key and the auditors' partial index, a DEFAULT
partition and the range partitions from the oldest record's interval to AHEAD intervals past now
are made, every record is copied (the rollup triggers are not on the new table yet: nothing is
counted twice), the identity continues after the highest id, the old table is dropped, and the
append-only and rollup triggers are created on the parent, which gives them to every partition,
present and future.

One-way, and not for a database that serves: the copy holds ACCESS EXCLUSIVE on the record table
for as long as it takes (18 s for 300k records), and every exchange writes a record. On a table of
more than OFFLINE_ABOVE records it refuses unless OPENWOP_MIGRATE_OFFLINE says the doors are
stopped (docs/operators/upgrading-records.md: stop the doors, migrate, start them). Migrating
audit below 0010 is refused before anything is undone (apps/audit/apps.py): deploy the earlier
code instead, which serves this table as it is.
"""

from typing import Any

from django.db import migrations, models
from django.utils import timezone

OLD = "audit_hostevent_unpartitioned"
COLUMNS = "id, subject_id, subject, event_id, type, payload, durable, sequence, at, tenant_id, digest, prev_digest"
TYPE = "negotiation.decided"

FREE_NAMES = [  # index-backed names the new table takes (index names are schema-wide)
    f"ALTER INDEX IF EXISTS {name} RENAME TO {name}_old"
    for name in ("audit_hostevent_pkey", "hostevent_stream_sequence", "audit_hostevent_negotiation_at")
]
CREATE = [
    f"ALTER TABLE audit_hostevent RENAME TO {OLD}",
    *FREE_NAMES,
    f"""CREATE TABLE audit_hostevent (LIKE {OLD} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)
        PARTITION BY RANGE (at)""",
    "ALTER TABLE audit_hostevent ADD CONSTRAINT audit_hostevent_pkey PRIMARY KEY (id, at)",
    "ALTER TABLE audit_hostevent ADD CONSTRAINT hostevent_stream_sequence UNIQUE (tenant_id, subject_id, sequence, at)",
    "ALTER TABLE audit_hostevent ADD CONSTRAINT hostevent_event_id_at UNIQUE (event_id, at)",
    """ALTER TABLE audit_hostevent ADD CONSTRAINT audit_hostevent_tenant_id_40365123_fk_tenants_tenant_id
        FOREIGN KEY (tenant_id) REFERENCES tenants_tenant (id) DEFERRABLE INITIALLY DEFERRED""",
    f"CREATE INDEX audit_hostevent_negotiation_at ON audit_hostevent (at DESC, id DESC) WHERE type = '{TYPE}'",
    "CREATE TABLE audit_hostevent_default PARTITION OF audit_hostevent DEFAULT",
]
FILL = [
    f"INSERT INTO audit_hostevent ({COLUMNS}) SELECT {COLUMNS} FROM {OLD}",
    f"""SELECT setval(pg_get_serial_sequence('audit_hostevent', 'id'), max(id)) FROM {OLD} HAVING max(id) IS NOT NULL""",
    f"DROP TABLE {OLD}",
    # The functions of migrations 0002, 0005 and 0007, on the parent: cloned onto every partition.
    """CREATE TRIGGER audit_hostevent_append_only BEFORE UPDATE OR DELETE ON audit_hostevent
       FOR EACH ROW EXECUTE FUNCTION audit_hostevent_refuse_change()""",
    """CREATE TRIGGER audit_hostevent_negotiation_rollup AFTER INSERT ON audit_hostevent
       REFERENCING NEW TABLE AS new_records FOR EACH STATEMENT
       EXECUTE FUNCTION audit_negotiationdaily_from_statement()""",
    """CREATE TRIGGER audit_hostevent_negotiation_peer_rollup AFTER INSERT ON audit_hostevent
       REFERENCING NEW TABLE AS new_records FOR EACH STATEMENT
       EXECUTE FUNCTION audit_negotiationpeer_from_statement()""",
]


OFFLINE_ABOVE = 20_000  # records: about 1 s of the copy, the longest a door may wait on it


def partition(apps: Any, schema_editor: Any) -> None:
    from django.conf import settings
    from django.core.management.base import CommandError

    from apps.audit.partitions import records_partitions_ensure

    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM (SELECT 1 FROM audit_hostevent LIMIT %s) AS r", [OFFLINE_ABOVE + 1])
        large = cursor.fetchone()[0] > OFFLINE_ABOVE
    if large and not settings.OPENWOP_MIGRATE_OFFLINE:
        raise CommandError(
            f"audit 0010 copies the records table (more than {OFFLINE_ABOVE} records here) in one transaction"
            " holding a lock that stops every door for the whole copy (about 60 us a record). Run it with the"
            " doors stopped: stop them, OPENWOP_MIGRATE_OFFLINE=1 manage.py migrate, start them"
            " (docs/operators/upgrading-records.md). Nothing was changed."
        )
    for sql in CREATE:
        schema_editor.execute(sql, params=None)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT min(at) FROM {OLD}")
        oldest = cursor.fetchone()[0]
    now = timezone.now()
    records_partitions_ensure(now, since=min(oldest, now) if oldest else None)
    for sql in FILL:
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0009_archiveexport")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(partition, elidable=False)],
            state_operations=[
                migrations.AlterField(
                    model_name="hostevent",
                    name="event_id",
                    field=models.CharField(help_text="Opaque, host-minted, unique per host.", max_length=128),
                ),
                migrations.RemoveConstraint(model_name="hostevent", name="hostevent_stream_sequence"),
                migrations.AddConstraint(
                    model_name="hostevent",
                    constraint=models.UniqueConstraint(
                        fields=("tenant", "subject_id", "sequence", "at"), name="hostevent_stream_sequence"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="hostevent",
                    constraint=models.UniqueConstraint(fields=("event_id", "at"), name="hostevent_event_id_at"),
                ),
            ],
        ),
    ]
