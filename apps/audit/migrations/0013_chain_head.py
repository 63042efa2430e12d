"""The chain no longer depends on the writer's version (apps/audit/chain.py, chainer.py).

Three catalog changes, none of which reads or rewrites a record:

- `HostEventStream.chained_through`, nullable: how far the stream's chain reaches. Empty on every
  existing row, which reads as "the head is `last_sequence`" (or 0 while `last_digest` is still
  GENESIS: a database whose records were written before the chain, whose backfill no longer runs
  inside `migrate`, migration 0008), so no row is updated here.
- A row trigger on the stream table, fired only when a writer moves the counter without saying
  where the head is (a writer that does not know the column: the previous releases). If it moved
  `last_digest` too, it chained its records and the head is the counter; if not, its records wait
  for the chainer and the head stays where it was. This release's writers always set the column,
  so the trigger's WHEN is false for them and its function never runs on their statements.
- The records' append-only trigger lets the chainer seal a record written without digests: an
  UPDATE passes only when the row had no digest and nothing but `prev_digest` and `digest` changes.

Every statement takes its lock under a 2 s lock timeout (a brief ACCESS EXCLUSIVE for the column,
SHARE ROW EXCLUSIVE for the trigger, none for the functions). Reversible.
"""

from typing import Any

from django.db import migrations, models

GENESIS = "0" * 64
HEAD = f"coalesce(OLD.chained_through, CASE WHEN OLD.last_digest = '{GENESIS}' THEN 0 ELSE OLD.last_sequence END)"

TRACK_HEAD: list[Any] = [
    f"""
    CREATE OR REPLACE FUNCTION audit_hosteventstream_track_head() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.last_digest IS DISTINCT FROM OLD.last_digest THEN
            NEW.chained_through := NEW.last_sequence;  -- the writer chained its records
        ELSE
            NEW.chained_through := {HEAD};  -- its records wait for the chainer
        END IF;
        RETURN NEW;
    END;
    $$
    """,
    """
    CREATE TRIGGER audit_hosteventstream_track_head BEFORE UPDATE ON audit_hosteventstream FOR EACH ROW
    WHEN (NEW.chained_through IS NOT DISTINCT FROM OLD.chained_through
          AND NEW.last_sequence IS DISTINCT FROM OLD.last_sequence)
    EXECUTE FUNCTION audit_hosteventstream_track_head()
    """,
]
UNTRACK_HEAD: list[Any] = [
    "DROP TRIGGER IF EXISTS audit_hosteventstream_track_head ON audit_hosteventstream",
    "DROP FUNCTION IF EXISTS audit_hosteventstream_track_head()",
]

# Migration 0011's function (apps.core.append_only.refuse_change_function, expirable), plus the seal.
_CONTENT = "id, tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at"
_SEAL = f"""
        IF TG_OP = 'UPDATE' AND OLD.digest = '' AND OLD.prev_digest = '' AND NEW.digest <> ''
           AND NEW.prev_digest <> ''
           AND ROW({", ".join(f"NEW.{c}" for c in _CONTENT.split(", "))})
               IS NOT DISTINCT FROM ROW({", ".join(f"OLD.{c}" for c in _CONTENT.split(", "))}) THEN
            RETURN NEW;
        END IF;"""


def refuse_change(*, sealable: bool) -> str:
    seal = _SEAL if sealable else ""
    return f"""
        CREATE OR REPLACE FUNCTION audit_hostevent_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' AND current_setting('openwop.retention_expiry', true) = 'on' THEN
                RETURN OLD;
            END IF;{seal}
            RAISE EXCEPTION 'audit_hostevent is append-only: % refused', TG_OP
                USING ERRCODE = 'insufficient_privilege';
        END;
        $$
        """


SEALABLE: list[Any] = [refuse_change(sealable=True)]
UNSEALABLE: list[Any] = [refuse_change(sealable=False)]
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '2s'"


class Migration(migrations.Migration):
    dependencies = [("audit", "0012_peer_rollup_hot_updates")]

    operations = [
        migrations.RunSQL(LOCK_TIMEOUT, LOCK_TIMEOUT, elidable=False),
        migrations.AddField(
            model_name="hosteventstream",
            name="chained_through",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.RunSQL(TRACK_HEAD, UNTRACK_HEAD, elidable=False),
        migrations.RunSQL(SEALABLE, UNSEALABLE, elidable=False),
    ]
