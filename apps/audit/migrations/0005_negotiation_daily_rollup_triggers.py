"""Keep `audit_negotiationdailycount` current as `negotiation.decided` records are written, and backfill it.

Triggers, not application code: the records are inserted by the ORM and by raw multi-row INSERTs (a
group-commit writer), on two tables (`audit_hostevent`: the caller's host events; `runs_runevent`:
decisions made inside a run). Each trigger upserts the record's (UTC day, tenant, protocol, outcome
class, requested version) row, so the auditors' charts read a table whose size follows the number
of days, never the number of records.

- PostgreSQL: `audit_hostevent` (where most records live, often many per INSERT) has a statement
  trigger with a transition table, one grouped upsert per statement; `runs_runevent` (mostly other
  event types) has a row trigger whose WHEN clause skips every other type without calling anything.
  Upserts go in key order, so two writers take the rollup rows' locks in the same order.

The outcome class is `apps.audit.negotiations.outcome_class`: refused unless `outcome` is
"accepted"; downgraded when accepted with a `requested` version other than `version`.
Trigger creation and backfill share this migration's transaction: PostgreSQL's CREATE TRIGGER
blocks concurrent INSERTs on the table until the backfill commits, so no record is counted twice
or missed.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

TYPE = "negotiation.decided"
ROLLUP = "audit_negotiationdailycount"
KEY = "day, tenant_id, protocol, outcome, requested"

# The auditors' list pages newest first by (at, id) through the records of one type: a partial index
# per table keeps each page a short index walk however many other events the tables hold.
INDEXES = [
    f"CREATE INDEX IF NOT EXISTS {table}_negotiation_at ON {table} (at DESC, id DESC) WHERE type = '{TYPE}'"
    for table in ("audit_hostevent", "runs_runevent")
]
DROP_INDEXES = [f"DROP INDEX IF EXISTS {table}_negotiation_at" for table in ("audit_hostevent", "runs_runevent")]

# --- PostgreSQL -----------------------------------------------------------------------------------

PG_OUTCOME = """CASE
    WHEN {p}->>'outcome' IS DISTINCT FROM 'accepted' THEN 'refused'
    WHEN jsonb_typeof({p}->'requested') IS NOT NULL AND jsonb_typeof({p}->'requested') <> 'null'
         AND ({p}->'version') IS DISTINCT FROM ({p}->'requested') THEN 'downgraded'
    ELSE 'accepted' END"""


def _pg_grouped_select(source: str, where: str) -> str:
    outcome = PG_OUTCOME.format(p="r.payload::jsonb")
    return f"""
        SELECT (r.at AT TIME ZONE 'UTC')::date AS day, r.tenant_id,
               coalesce(r.payload::jsonb->>'protocol', '') AS protocol, {outcome} AS outcome,
               coalesce(r.payload::jsonb->>'requested', '') AS requested, count(*) AS n
        FROM {source} r WHERE {where}
        GROUP BY 1, 2, 3, 4, 5"""


def _pg_upsert(select: str) -> str:
    return f"""
        INSERT INTO {ROLLUP} ({KEY}, count)
        SELECT day, tenant_id, protocol, outcome, requested, n FROM ({select}) AS grouped
        ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT ({KEY}) DO UPDATE SET count = {ROLLUP}.count + EXCLUDED.count"""


PG_INSTALL = INDEXES + [
    f"""
    CREATE OR REPLACE FUNCTION audit_negotiationdaily_from_statement() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        {_pg_upsert(_pg_grouped_select("new_records", f"r.type = '{TYPE}'"))};
        RETURN NULL;
    END;
    $$
    """,
    f"""
    CREATE OR REPLACE FUNCTION audit_negotiationdaily_from_row() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {ROLLUP} ({KEY}, count)
        VALUES ((NEW.at AT TIME ZONE 'UTC')::date, NEW.tenant_id,
                coalesce(NEW.payload::jsonb->>'protocol', ''), {PG_OUTCOME.format(p="NEW.payload::jsonb")},
                coalesce(NEW.payload::jsonb->>'requested', ''), 1)
        ON CONFLICT ({KEY}) DO UPDATE SET count = {ROLLUP}.count + 1;
        RETURN NULL;
    END;
    $$
    """,
    "DROP TRIGGER IF EXISTS audit_hostevent_negotiation_rollup ON audit_hostevent",
    """CREATE TRIGGER audit_hostevent_negotiation_rollup AFTER INSERT ON audit_hostevent
       REFERENCING NEW TABLE AS new_records FOR EACH STATEMENT
       EXECUTE FUNCTION audit_negotiationdaily_from_statement()""",
    "DROP TRIGGER IF EXISTS runs_runevent_negotiation_rollup ON runs_runevent",
    f"""CREATE TRIGGER runs_runevent_negotiation_rollup AFTER INSERT ON runs_runevent
       FOR EACH ROW WHEN (NEW.type = '{TYPE}')
       EXECUTE FUNCTION audit_negotiationdaily_from_row()""",
    # Backfill what was written before the triggers.
    f"DELETE FROM {ROLLUP}",
    _pg_upsert(
        f"""SELECT day, tenant_id, protocol, outcome, requested, sum(n) AS n FROM (
            {_pg_grouped_select("audit_hostevent", f"r.type = '{TYPE}'")}
            UNION ALL
            {_pg_grouped_select("runs_runevent", f"r.type = '{TYPE}'")}
        ) AS both_tables GROUP BY 1, 2, 3, 4, 5"""
    ),
]
PG_UNINSTALL = [
    "DROP TRIGGER IF EXISTS audit_hostevent_negotiation_rollup ON audit_hostevent",
    "DROP TRIGGER IF EXISTS runs_runevent_negotiation_rollup ON runs_runevent",
    "DROP FUNCTION IF EXISTS audit_negotiationdaily_from_statement()",
    "DROP FUNCTION IF EXISTS audit_negotiationdaily_from_row()",
    *DROP_INDEXES,
]

def _run(statements: list[str]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        for sql in statements:
            schema_editor.execute(sql, params=None)  # None: no %-placeholder processing

    return run


class Migration(migrations.Migration):
    dependencies = [("audit", "0004_negotiation_daily_rollup"), ("runs", "0006_run_tally")]

    operations = [
        migrations.RunPython(
            _run(PG_INSTALL),
            _run(PG_UNINSTALL),
            elidable=False,
        ),
    ]
