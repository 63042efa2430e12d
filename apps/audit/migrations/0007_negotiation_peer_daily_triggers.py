"""Keep `audit_negotiationpeerdaily` current as `negotiation.decided` records are written, and backfill it.

The same shape as migration 0005 (read its docstring): triggers on both homes of the record, so the
ORM, a group-commit writer's raw multi-row INSERT and a run's log all keep the rollup current
without any call site knowing. Each record adds 1 to `count` of its (UTC day, tenant, protocol,
requested version, peer digest) row, and 1 to `accepted` when its `outcome` is "accepted" (a
downgrade is accepted). `requested` and `peer_digest` are "" when the record has none.

- PostgreSQL: a statement trigger with a transition table on `audit_hostevent` (one grouped
  upsert per statement, in key order so concurrent writers lock rollup rows in the same order),
  and a row trigger on `runs_runevent` whose WHEN clause skips every other event type.

Trigger creation and backfill share this migration's transaction (CREATE TRIGGER blocks concurrent
INSERTs on the table until the backfill commits): no record is counted twice or missed.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

TYPE = "negotiation.decided"
ROLLUP = "audit_negotiationpeerdaily"
KEY = "day, tenant_id, protocol, requested, peer_digest"

# --- PostgreSQL -----------------------------------------------------------------------------------


def _pg_grouped_select(source: str) -> str:
    p = "r.payload::jsonb"
    return f"""
        SELECT (r.at AT TIME ZONE 'UTC')::date AS day, r.tenant_id,
               coalesce({p}->>'protocol', '') AS protocol, coalesce({p}->>'requested', '') AS requested,
               coalesce({p}->>'peerDigest', '') AS peer_digest, count(*) AS n,
               count(*) FILTER (WHERE {p}->>'outcome' = 'accepted') AS accepted
        FROM {source} r WHERE r.type = '{TYPE}'
        GROUP BY 1, 2, 3, 4, 5"""


def _pg_upsert(select: str) -> str:
    return f"""
        INSERT INTO {ROLLUP} ({KEY}, count, accepted)
        SELECT day, tenant_id, protocol, requested, peer_digest, n, accepted FROM ({select}) AS grouped
        ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT ({KEY}) DO UPDATE
        SET count = {ROLLUP}.count + EXCLUDED.count, accepted = {ROLLUP}.accepted + EXCLUDED.accepted"""


PG_INSTALL = [
    f"""
    CREATE OR REPLACE FUNCTION audit_negotiationpeer_from_statement() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        {_pg_upsert(_pg_grouped_select("new_records"))};
        RETURN NULL;
    END;
    $$
    """,
    f"""
    CREATE OR REPLACE FUNCTION audit_negotiationpeer_from_row() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {ROLLUP} ({KEY}, count, accepted)
        VALUES ((NEW.at AT TIME ZONE 'UTC')::date, NEW.tenant_id,
                coalesce(NEW.payload::jsonb->>'protocol', ''), coalesce(NEW.payload::jsonb->>'requested', ''),
                coalesce(NEW.payload::jsonb->>'peerDigest', ''), 1,
                CASE WHEN NEW.payload::jsonb->>'outcome' = 'accepted' THEN 1 ELSE 0 END)
        ON CONFLICT ({KEY}) DO UPDATE
        SET count = {ROLLUP}.count + 1, accepted = {ROLLUP}.accepted + EXCLUDED.accepted;
        RETURN NULL;
    END;
    $$
    """,
    "DROP TRIGGER IF EXISTS audit_hostevent_negotiation_peer_rollup ON audit_hostevent",
    """CREATE TRIGGER audit_hostevent_negotiation_peer_rollup AFTER INSERT ON audit_hostevent
       REFERENCING NEW TABLE AS new_records FOR EACH STATEMENT
       EXECUTE FUNCTION audit_negotiationpeer_from_statement()""",
    "DROP TRIGGER IF EXISTS runs_runevent_negotiation_peer_rollup ON runs_runevent",
    f"""CREATE TRIGGER runs_runevent_negotiation_peer_rollup AFTER INSERT ON runs_runevent
       FOR EACH ROW WHEN (NEW.type = '{TYPE}')
       EXECUTE FUNCTION audit_negotiationpeer_from_row()""",
    # Backfill what was written before the triggers.
    f"DELETE FROM {ROLLUP}",
    _pg_upsert(
        f"""SELECT day, tenant_id, protocol, requested, peer_digest, sum(n) AS n, sum(accepted) AS accepted FROM (
            {_pg_grouped_select("audit_hostevent")}
            UNION ALL
            {_pg_grouped_select("runs_runevent")}
        ) AS both_tables GROUP BY 1, 2, 3, 4, 5"""
    ),
]
PG_UNINSTALL = [
    "DROP TRIGGER IF EXISTS audit_hostevent_negotiation_peer_rollup ON audit_hostevent",
    "DROP TRIGGER IF EXISTS runs_runevent_negotiation_peer_rollup ON runs_runevent",
    "DROP FUNCTION IF EXISTS audit_negotiationpeer_from_statement()",
    "DROP FUNCTION IF EXISTS audit_negotiationpeer_from_row()",
]

def _run(statements: list[str]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        for sql in statements:
            schema_editor.execute(sql, params=None)  # None: no %-placeholder processing

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0006_negotiation_peer_daily"),
        ("audit", "0005_negotiation_daily_rollup_triggers"),
        ("runs", "0006_run_tally"),
    ]

    operations = [
        migrations.RunPython(
            _run(PG_INSTALL),
            _run(PG_UNINSTALL),
            elidable=False,
        ),
    ]
