"""Bench-only settings: the host exactly as shipped, minus the hash chain's computation (issue 36's
"the chain costs GetTask <= 5 %", bench/retention_load.py). Never a product switch: nothing in
apps/ or openwop_host/ reads it; only the bench starts a server with
DJANGO_SETTINGS_MODULE=bench.settings_nochain (`bench` is found as a namespace package from the
checkout's root, the server's working directory).

What differs, and nothing else (the `NoChain` app's `ready()` swaps two module globals):

- `apps.audit.group_commit.APPEND_SQL` (the group commit every exchange's `negotiation.decided`
  record goes through) and `apps.audit.services.APPEND_SQL` (the ORM path) become `NOCHAIN_SQL`:
  the same one statement from the same parameters (the stream rows locked in the same order, the
  counter advanced, the rows inserted with their sequences, one statement = one commit) as it was
  before the chain (git show 3dc14ba:apps/audit/group_commit.py), without the recursive `chain`
  CTE, its two `sha256()` per record and the `last_digest` update: `prev_digest` and `digest` keep
  their column default "" (such a stream does not verify: the bench gives it an API key of its own).
  It sets the stream's `chained_through` to its counter, as the shipped statement does when it
  chains: otherwise the stream table's trigger would mark the stream as waiting for the chainer
  (apps/audit/chainer.py), whose beat job would then link those records during the point.
- `apps.audit.services.content_hash_of_texts` (Python's canonical JSON + SHA-256 of the record,
  computed before the record is queued; both writers build their rows there) returns "" without
  computing anything.
"""

from __future__ import annotations

from django.apps import AppConfig

from openwop_host.settings import *  # noqa: F403
from openwop_host.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench.settings_nochain.NoChain"]

# Exactly what APPEND_SQL inserts and returns (the ORM path reads all five columns), minus the chain.
NOCHAIN_SQL = """
WITH r AS (
    SELECT * FROM unnest(
        %(tenant_id)b::bigint[], %(subject_id)b::text[], %(subject)b::text[], %(event_id)b::text[],
        %(type)b::text[], %(payload)b::text[], %(durable)b::boolean[], %(ordinal)b::bigint[],
        %(at)b::timestamptz[], %(content)b::text[]
    ) AS r(tenant_id, subject_id, subject, event_id, type, payload, durable, ordinal, at, content)
), wanted AS (
    SELECT tenant_id, subject_id, count(*) AS n FROM r GROUP BY tenant_id, subject_id
), locked AS MATERIALIZED (
    SELECT s.id, w.n FROM audit_hosteventstream AS s
    JOIN wanted AS w ON s.tenant_id = w.tenant_id AND s.subject_id = w.subject_id
    ORDER BY s.tenant_id, s.subject_id
    FOR UPDATE OF s
), bumped AS (
    UPDATE audit_hosteventstream AS s SET last_sequence = s.last_sequence + l.n,
        chained_through = s.last_sequence + l.n
    FROM locked AS l WHERE s.id = l.id
    RETURNING s.tenant_id, s.subject_id, s.last_sequence - l.n AS base
)
INSERT INTO audit_hostevent (tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at)
SELECT r.tenant_id, r.subject_id, r.subject::jsonb, r.event_id, r.type, r.payload::jsonb, r.durable,
       b.base + r.ordinal, r.at
FROM r JOIN bumped AS b ON b.tenant_id = r.tenant_id AND b.subject_id = r.subject_id
RETURNING event_id, id, sequence, prev_digest, digest
"""


def _no_content_hash(**_fields: object) -> str:
    return ""


class NoChain(AppConfig):
    name = "bench.settings_nochain"
    label = "bench_nochain"
    verbose_name = "bench: records without the hash chain"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.audit import group_commit, services
        from apps.audit.models import HostEvent, HostEventStream

        # The table names the statement hard-codes are the models' (a rename fails here, loudly).
        tables = (HostEvent._meta.db_table, HostEventStream._meta.db_table)
        assert tables == ("audit_hostevent", "audit_hosteventstream"), tables
        for module in (group_commit, services):
            module.APPEND_SQL = NOCHAIN_SQL  # type: ignore[attr-defined]
        services.content_hash_of_texts = _no_content_hash  # type: ignore[assignment]
