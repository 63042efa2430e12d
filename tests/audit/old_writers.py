"""The record writers of earlier releases, frozen here as they shipped (their SQL, not today's code):
what a pod of that release still runs against the upgraded database during a rolling upgrade.

- `previous_release_append`: the release this one upgrades from (0.19.0, commit 556a03d), whose
  one statement allocates the sequences, links the records (`prevDigest`, `digest`) and moves the
  stream's `last_sequence` and `last_digest`, and knows nothing of `chained_through`. Its Python
  computed each record's content hash before the statement: `content_hash` below does it with
  json and hashlib only, as the README defines it.
- `prechain_group_append` / `prechain_orm_append`: a release before the chain (commit 3dc14ba's
  group commit; the ORM path of 8fb36f6: advance the counter, then INSERT without the digest
  columns): they move `last_sequence` only and leave `prev_digest` and `digest` at their default "".
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from apps.core.ids import mint_opaque
from apps.tenants.subject import Subject

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TYPE = "negotiation.decided"

# git show 556a03d:apps/audit/chain.py (APPEND_SQL), table names and the link expression written out.
_LINK = "encode(sha256(convert_to({prev} || ':' || ({seq})::text || ':' || {content}, 'UTF8')), 'hex')"
PREVIOUS_RELEASE_SQL = f"""
WITH RECURSIVE r AS (
    SELECT * FROM unnest(
        %(tenant_id)b::bigint[], %(subject_id)b::text[], %(subject)b::text[], %(event_id)b::text[],
        %(type)b::text[], %(payload)b::text[], %(durable)b::boolean[], %(ordinal)b::bigint[],
        %(at)b::timestamptz[], %(content)b::text[]
    ) AS r(tenant_id, subject_id, subject, event_id, type, payload, durable, ordinal, at, content)
), wanted AS (
    SELECT tenant_id, subject_id, count(*) AS n FROM r GROUP BY tenant_id, subject_id
), locked AS MATERIALIZED (
    SELECT s.id, s.tenant_id, s.subject_id, s.last_sequence, s.last_digest, w.n FROM audit_hosteventstream AS s
    JOIN wanted AS w ON s.tenant_id = w.tenant_id AND s.subject_id = w.subject_id
    ORDER BY s.tenant_id, s.subject_id
    FOR UPDATE OF s
), chain AS (
    SELECT r.tenant_id, r.subject_id, r.ordinal, l.last_sequence + 1 AS sequence, l.last_digest::text AS prev,
           {_LINK.format(prev="l.last_digest", seq="l.last_sequence + 1", content="r.content")} AS digest
    FROM r JOIN locked AS l ON l.tenant_id = r.tenant_id AND l.subject_id = r.subject_id
    WHERE r.ordinal = 1
    UNION ALL
    SELECT r.tenant_id, r.subject_id, r.ordinal, c.sequence + 1, c.digest,
           {_LINK.format(prev="c.digest", seq="c.sequence + 1", content="r.content")}
    FROM chain AS c JOIN r ON r.tenant_id = c.tenant_id AND r.subject_id = c.subject_id AND r.ordinal = c.ordinal + 1
), bumped AS (
    UPDATE audit_hosteventstream AS s SET last_sequence = s.last_sequence + l.n, last_digest = c.digest
    FROM locked AS l JOIN chain AS c ON c.tenant_id = l.tenant_id AND c.subject_id = l.subject_id AND c.ordinal = l.n
    WHERE s.id = l.id
)
INSERT INTO audit_hostevent (
    tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at, prev_digest, digest
)
SELECT r.tenant_id, r.subject_id, r.subject::jsonb, r.event_id, r.type, r.payload::jsonb, r.durable,
       c.sequence, r.at, c.prev, c.digest
FROM r JOIN chain AS c ON c.tenant_id = r.tenant_id AND c.subject_id = r.subject_id AND c.ordinal = r.ordinal
RETURNING event_id, id, sequence, prev_digest, digest
"""

# git show 3dc14ba:apps/audit/group_commit.py (_APPEND_SQL).
PRECHAIN_GROUP_SQL = """
WITH r AS (
    SELECT * FROM unnest(
        %(tenant_id)b::bigint[], %(subject_id)b::text[], %(subject)b::text[], %(event_id)b::text[],
        %(type)b::text[], %(payload)b::text[], %(ordinal)b::bigint[], %(at)b::timestamptz[]
    ) AS r(tenant_id, subject_id, subject, event_id, type, payload, ordinal, at)
), wanted AS (
    SELECT tenant_id, subject_id, count(*) AS n FROM r GROUP BY tenant_id, subject_id
), locked AS MATERIALIZED (
    SELECT s.id, w.n FROM audit_hosteventstream AS s
    JOIN wanted AS w ON s.tenant_id = w.tenant_id AND s.subject_id = w.subject_id
    ORDER BY s.tenant_id, s.subject_id
    FOR UPDATE OF s
), bumped AS (
    UPDATE audit_hosteventstream AS s SET last_sequence = s.last_sequence + l.n
    FROM locked AS l WHERE s.id = l.id
    RETURNING s.tenant_id, s.subject_id, s.last_sequence - l.n AS base
)
INSERT INTO audit_hostevent (tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at)
SELECT r.tenant_id, r.subject_id, r.subject::jsonb, r.event_id, r.type, r.payload::jsonb, true,
       b.base + r.ordinal, r.at
FROM r JOIN bumped AS b ON b.tenant_id = r.tenant_id AND b.subject_id = r.subject_id
RETURNING event_id
"""

# git show 8fb36f6:apps/audit/services.py (_ADVANCE_SQL), then the ORM's INSERT of that release's model.
PRECHAIN_ADVANCE_SQL = (
    "UPDATE audit_hosteventstream SET last_sequence = last_sequence + 1"
    " WHERE tenant_id = %s AND subject_id = %s RETURNING last_sequence"
)
PRECHAIN_INSERT_SQL = (
    "INSERT INTO audit_hostevent (tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at)"
    " VALUES (%s, %s, %s::jsonb, %s, %s, %s::jsonb, %s, %s, %s) RETURNING id"
)


def content_hash(*, tenant: str, subject_id: str, subject: dict[str, Any], event_id: str, type: str,
                 durable: bool, at: datetime, payload: dict[str, Any]) -> str:  # fmt: skip
    """The record's content hash as the README defines it (payloads here hold no floats)."""
    content = {
        "tenant": tenant, "subjectId": subject_id, "subject": subject, "eventId": event_id, "type": type,
        "durable": durable, "at": (at - EPOCH) // timedelta(microseconds=1), "payload": payload,
    }  # fmt: skip
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def link(prev: str, sequence: int, content: str) -> str:
    return hashlib.sha256(f"{prev}:{sequence}:{content}".encode()).hexdigest()


def _ensure_stream(subject: Subject) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO audit_hosteventstream (tenant_id, subject_id, last_sequence) VALUES (%s, %s, 0)"
            " ON CONFLICT (tenant_id, subject_id) DO NOTHING",
            [subject.tenant_pk, subject.subject_id],
        )


def previous_release_append(subject: Subject, payloads: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """One statement of the previous release's writer: `payloads` as records of one stream."""
    _ensure_stream(subject)
    wire = subject.as_wire()
    rows = [(mint_opaque(), timezone.now(), payload) for payload in payloads]
    params = {
        "tenant_id": [subject.tenant_pk] * len(rows), "subject_id": [subject.subject_id] * len(rows),
        "subject": [json.dumps(wire)] * len(rows), "event_id": [r[0] for r in rows], "type": [TYPE] * len(rows),
        "payload": [json.dumps(r[2]) for r in rows], "durable": [True] * len(rows),
        "ordinal": list(range(1, len(rows) + 1)), "at": [r[1] for r in rows],
        "content": [content_hash(tenant=subject.tenant, subject_id=subject.subject_id, subject=wire,
                                 event_id=r[0], type=TYPE, durable=True, at=r[1], payload=r[2]) for r in rows],
    }  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(PREVIOUS_RELEASE_SQL, params)
        return cursor.fetchall()


def prechain_group_append(subject: Subject, payloads: list[dict[str, Any]]) -> None:
    """One statement of a pre-chain release's group commit: `payloads` as records of one stream."""
    _ensure_stream(subject)
    rows = [(mint_opaque(), timezone.now(), payload) for payload in payloads]
    params = {
        "tenant_id": [subject.tenant_pk] * len(rows), "subject_id": [subject.subject_id] * len(rows),
        "subject": [json.dumps(subject.as_wire())] * len(rows), "event_id": [r[0] for r in rows],
        "type": [TYPE] * len(rows), "payload": [json.dumps(r[2]) for r in rows],
        "ordinal": list(range(1, len(rows) + 1)), "at": [r[1] for r in rows],
    }  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(PRECHAIN_GROUP_SQL, params)
        assert len(cursor.fetchall()) == len(rows)


def prechain_orm_append(subject: Subject, payload: dict[str, Any]) -> None:
    """A pre-chain release's ORM path: advance the counter, then INSERT the record without digests."""
    _ensure_stream(subject)
    with connection.cursor() as cursor:
        cursor.execute(PRECHAIN_ADVANCE_SQL, [subject.tenant_pk, subject.subject_id])
        (sequence,) = cursor.fetchone()
        cursor.execute(
            PRECHAIN_INSERT_SQL,
            [subject.tenant_pk, subject.subject_id, json.dumps(subject.as_wire()), mint_opaque(), TYPE,
             json.dumps(payload), True, sequence, timezone.now()],
        )  # fmt: skip
