"""The records' hash chain (issue 36 item 4, apps/audit/chain.py): digest columns, and the chain of
the records written before it, computed here in (tenant, subject, sequence) order.

The backfill runs with the append-only trigger disabled inside this migration's transaction (ALTER
TABLE holds its lock to commit, so no writer sees the table unguarded); it reads the rows through a
server-side cursor and writes them back in batches, so memory does not grow with the table.
"""

import json
from typing import Any

from django.db import migrations, models

BATCH = 5000


def _write(cursor: Any, rows: list[tuple[int, str, str]]) -> None:
    cursor.execute(
        "UPDATE audit_hostevent AS e SET prev_digest = v.prev, digest = v.digest"
        " FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS v(id, prev, digest) WHERE e.id = v.id",
        [[row[0] for row in rows], [row[1] for row in rows], [row[2] for row in rows]],
    )


def chain_existing(apps: Any, schema_editor: Any) -> None:
    from apps.audit.chain import GENESIS, content_hash, link

    raw = schema_editor.connection.connection  # psycopg: a named cursor streams the rows
    with raw.cursor() as writer:
        writer.execute("SELECT EXISTS (SELECT 1 FROM audit_hostevent)")
        if not writer.fetchone()[0]:
            return
        writer.execute("ALTER TABLE audit_hostevent DISABLE TRIGGER audit_hostevent_append_only")
        heads: dict[tuple[int, str], str] = {}
        pending: list[tuple[int, str, str]] = []
        with raw.cursor(name="audit_chain_backfill") as reader:
            reader.itersize = BATCH
            reader.execute(
                "SELECT e.id, e.tenant_id, t.slug, e.subject_id, e.subject, e.event_id, e.type, e.durable, e.at,"
                " e.payload, e.sequence FROM audit_hostevent AS e JOIN tenants_tenant AS t ON t.id = e.tenant_id"
                " ORDER BY e.tenant_id, e.subject_id, e.sequence"
            )
            for pk, tenant_pk, slug, subject_id, subject, event_id, type_, durable, at, payload, sequence in reader:
                prev = heads.get((tenant_pk, subject_id), GENESIS)
                content = content_hash(  # Django's connection hands jsonb over as its text
                    tenant=slug, subject_id=subject_id, subject=json.loads(subject), event_id=event_id, type=type_,
                    durable=durable, at=at, payload=json.loads(payload),
                )
                digest = heads[(tenant_pk, subject_id)] = link(prev, sequence, content)
                pending.append((pk, prev, digest))
                if len(pending) >= BATCH:
                    _write(writer, pending)
                    pending = []
        if pending:
            _write(writer, pending)
        writer.execute(
            "UPDATE audit_hosteventstream AS s SET last_digest = v.digest"
            " FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS v(tenant_id, subject_id, digest)"
            " WHERE s.tenant_id = v.tenant_id AND s.subject_id = v.subject_id",
            [[key[0] for key in heads], [key[1] for key in heads], list(heads.values())],
        )
        writer.execute("ALTER TABLE audit_hostevent ENABLE TRIGGER audit_hostevent_append_only")


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0007_negotiation_peer_daily_triggers'),
    ]

    operations = [
        migrations.AddField(
            model_name='hostevent',
            name='digest',
            field=models.CharField(db_default='', help_text='SHA-256 chaining this record.', max_length=64),
        ),
        migrations.AddField(
            model_name='hostevent',
            name='prev_digest',
            field=models.CharField(db_default='', help_text="The predecessor's digest.", max_length=64),
        ),
        migrations.AddField(
            model_name='hosteventstream',
            name='expired_digest',
            field=models.CharField(db_default='0000000000000000000000000000000000000000000000000000000000000000', max_length=64),
        ),
        migrations.AddField(
            model_name='hosteventstream',
            name='expired_through',
            field=models.PositiveBigIntegerField(db_default=0),
        ),
        migrations.AddField(
            model_name='hosteventstream',
            name='last_digest',
            field=models.CharField(db_default='0000000000000000000000000000000000000000000000000000000000000000', help_text="The chain's head: the last record's digest.", max_length=64),
        ),
        migrations.RunPython(chain_existing, migrations.RunPython.noop, elidable=False),
    ]
