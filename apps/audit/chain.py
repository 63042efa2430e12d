"""The hash chain of the records (issue 36 item 4): every host event proves its predecessor.

Each (tenant, subject) stream is a chain. A record stores `prev_digest` (its predecessor's
`digest`; GENESIS for sequence 1) and

    digest = SHA-256( prev_digest ":" sequence ":" SHA-256(canonical content) )   (all hex, ASCII)

where the canonical content is the record's JSON (`canonical_content`): the tenant's slug, the
subject id, the Subject, the event id, type, delivery class, the instant (microseconds since the
Unix epoch) and the payload, keys sorted, no whitespace, UTF-8, integral numbers written as
integers. Anyone holding an export can recompute it with a JSON library and SHA-256; altering any
field, or removing, inserting or reordering a record, breaks every later link, and the stream's
head (`HostEventStream.last_digest`, the exports' manifests) pins the end.

Split so that the chain costs no round trip: the content hash depends only on what the writer
already holds, so Python computes it before the statement; the link depends on the predecessor,
which only the statement that locks the stream knows, so `APPEND_SQL` computes it in PostgreSQL
(`sha256()` is built in) while it allocates sequences. Both writers (the ORM path of
`services.host_event_append` and the group commit) run that one statement.

The chain does not depend on the writer's version. A writer that does not chain (a release before
the chain, still serving during a rolling upgrade) advances the counter and leaves the digests
empty; the stream's head then stays behind (`HostEventStream.chained_through`, kept by a trigger
on the stream table, migration 0013), this release's writers leave their records empty too while
it lags, and the chainer (apps/audit/chainer.py) links the empty records in sequence order with
this same function. A writer that chains (the release before this one) moves the head as this one
does. Verification is apps/audit/verify.py.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from apps.audit.models import GENESIS, HostEvent, HostEventStream

__all__ = [
    "APPEND_SQL",
    "GENESIS",
    "AppendRow",
    "append_params",
    "canonical_content",
    "canonical_json",
    "canonical_text",
    "chained_head",
    "chained_head_sql",
    "content_hash",
    "content_hash_of_texts",
    "link",
]


def _integral(value: Any) -> Any:
    """JSON numbers in one spelling: a float with an integral value becomes an int. PostgreSQL's
    jsonb keeps 1e+16 as 10000000000000000, which reads back as an int; this makes the content
    hashed at write time and the one read back from the table the same."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _integral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integral(item) for item in value]
    return value


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def instant(at: datetime) -> int:
    """The record's instant in the canonical content: microseconds since the Unix epoch (the
    table's precision), exact integer arithmetic."""
    return (at - _EPOCH) // _MICROSECOND


def canonical_json(value: Any) -> str:
    """A value's canonical JSON text: keys sorted at every level, no whitespace, not ASCII-escaped,
    integral numbers as integers."""
    return _CANONICAL.encode(_integral(value))


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)  # built once


@lru_cache(maxsize=4096)
def _string_json(value: str) -> str:
    """A repeated string field's JSON (a tenant's slug, a subject id, a type): written once."""
    return json.dumps(value, ensure_ascii=False)


def canonical_content(
    *,
    tenant: str,
    subject_id: str,
    subject: dict[str, Any],
    event_id: str,
    type: str,
    durable: bool,
    at: datetime,
    payload: dict[str, Any],
) -> bytes:
    """The bytes whose SHA-256 a record's digest covers: the JSON object {"at", "durable",
    "eventId", "payload", "subject", "subjectId", "tenant", "type"} with keys sorted at every level,
    no whitespace, UTF-8, integral numbers as integers (`canonical_json`)."""
    return canonical_text(
        tenant=tenant,
        subject_id=subject_id,
        subject_text=canonical_json(subject),
        event_id=event_id,
        type=type,
        durable=durable,
        at=at,
        payload_text=canonical_json(payload),
    ).encode()


def canonical_text(
    *, tenant: str, subject_id: str, subject_text: str, event_id: str, type: str, durable: bool, at: datetime,
    payload_text: str,
) -> str:  # fmt: skip
    """`canonical_content` (as text) from the Subject's and the payload's canonical JSON, which a
    writer already holds. Written out by hand in key order (what `json.dumps(sort_keys=True)` of
    the whole object gives) because every exchange pays it."""
    event = json.dumps(event_id, ensure_ascii=False)
    return (
        f'{{"at":{instant(at)},"durable":{"true" if durable else "false"},"eventId":{event},'
        f'"payload":{payload_text},"subject":{subject_text},"subjectId":{_string_json(subject_id)},'
        f'"tenant":{_string_json(tenant)},"type":{_string_json(type)}}}'
    )


def content_hash(**fields: Any) -> str:
    """Hex SHA-256 of `canonical_content(**fields)`: the part of the digest a writer computes."""
    return hashlib.sha256(canonical_content(**fields)).hexdigest()


def content_hash_of_texts(**fields: Any) -> str:
    """`content_hash` from `canonical_text`'s fields (the group commit's: the Subject's canonical
    JSON is kept per Subject, the payload's is the one the row stores)."""
    return hashlib.sha256(canonical_text(**fields).encode()).hexdigest()


@dataclass(slots=True, eq=False)
class AppendRow:
    """One record for `APPEND_SQL`, serialised by its writer's caller (a bad payload fails its own
    request only): the Subject's and the payload's canonical JSON, which the row stores and the
    chain hashes, and `content`, their `content_hash_of_texts(**row.texts())`, which each writer
    computes before its statement (the group commit: before queueing)."""

    tenant: str
    tenant_pk: int | None
    subject_id: str
    subject_text: str
    event_id: str
    type: str
    payload_text: str
    at: datetime
    durable: bool = True
    content: str = ""

    def texts(self) -> dict[str, Any]:
        """`canonical_text`'s fields."""
        return {name: getattr(self, name) for name in _TEXT_FIELDS}


_TEXT_FIELDS = ("tenant", "subject_id", "subject_text", "event_id", "type", "durable", "at", "payload_text")


def append_params(rows: list[AppendRow]) -> dict[str, list[Any]]:
    """`APPEND_SQL`'s parameters for `rows`: a stream's rows take its next sequences in their order."""
    seen: Counter[tuple[int | None, str]] = Counter()
    ordinal = []
    for row in rows:
        seen[row.tenant_pk, row.subject_id] += 1
        ordinal.append(seen[row.tenant_pk, row.subject_id])
    return {
        "tenant_id": [r.tenant_pk for r in rows],
        "subject_id": [r.subject_id for r in rows],
        "subject": [r.subject_text for r in rows],
        "event_id": [r.event_id for r in rows],
        "type": [r.type for r in rows],
        "payload": [r.payload_text for r in rows],
        "durable": [r.durable for r in rows],
        "ordinal": ordinal,
        "at": [r.at for r in rows],
        "content": [r.content for r in rows],
    }


def link(prev_digest: str, sequence: int, content: str) -> str:
    """A record's digest from its predecessor's, its sequence and its content hash (Python twin of
    LINK_SQL, used by the verifier)."""
    return hashlib.sha256(f"{prev_digest}:{sequence}:{content}".encode("ascii")).hexdigest()


def chained_head(stream: HostEventStream) -> int:
    """The last sequence the stream's chain reaches (`last_digest` is that record's digest): Python
    twin of `chained_head_sql`."""
    if stream.chained_through is not None:
        return stream.chained_through
    return 0 if stream.last_digest == GENESIS else stream.last_sequence


def chained_head_sql(alias: str) -> str:
    """`chained_head` of the stream row `alias` in SQL (the append statement, the chainer, the
    stream table's trigger)."""
    return (
        f"coalesce({alias}.chained_through,"
        f" CASE WHEN {alias}.last_digest = '{GENESIS}' THEN 0 ELSE {alias}.last_sequence END)"
    )


def _link_sql(prev: str, sequence: str, content: str) -> str:
    return f"encode(sha256(convert_to({prev} || ':' || ({sequence})::text || ':' || {content}, 'UTF8')), 'hex')"


_EVENTS = HostEvent._meta.db_table
_STREAMS = HostEventStream._meta.db_table

# Both writers' one statement. Its parameters are arrays, one element per record (binary `%(...)b`:
# arrays of JSON text need no escaping, and the text never changes with the batch size, so psycopg
# prepares it once per connection). `ordinal` numbers a stream's records in the batch from 1: their
# sequences follow in that order. `content` is each record's `content_hash`.
#
# `locked` takes the stream rows' locks in (tenant, subject) order, as every writer of every
# process does, so two statements never wait on each other in a cycle; under READ COMMITTED
# `FOR UPDATE` returns the row's newest committed version, so `last_sequence` and `last_digest`
# are the ones this statement extends. `chain` links a stream's records one ordinal at a time (its
# depth is the most records of one stream in the batch); `linked` is false while the stream's head
# lags its counter (records of a writer that does not chain wait for the chainer before it): its
# records are then written without digests, after those, for the chainer to link in order.
# `bumped` moves each counter, head and `chained_through` to the stream's last record; the insert
# reads it, so the counters move before any row goes in. The statement is one transaction on an
# autocommit connection and joins the caller's on the ORM path; either way it writes all its rows
# or none, and the locks are held to commit, so a reader never sees n+1 before n. A stream with no
# counter row yet is left out (the caller creates the counter and runs the statement again for
# those rows).
APPEND_SQL = f"""
WITH RECURSIVE r AS (
    SELECT * FROM unnest(
        %(tenant_id)b::bigint[], %(subject_id)b::text[], %(subject)b::text[], %(event_id)b::text[],
        %(type)b::text[], %(payload)b::text[], %(durable)b::boolean[], %(ordinal)b::bigint[],
        %(at)b::timestamptz[], %(content)b::text[]
    ) AS r(tenant_id, subject_id, subject, event_id, type, payload, durable, ordinal, at, content)
), wanted AS (
    SELECT tenant_id, subject_id, count(*) AS n FROM r GROUP BY tenant_id, subject_id
), locked AS MATERIALIZED (
    SELECT s.id, s.tenant_id, s.subject_id, s.last_sequence, s.last_digest, w.n,
           {chained_head_sql("s")} AS head
    FROM {_STREAMS} AS s
    JOIN wanted AS w ON s.tenant_id = w.tenant_id AND s.subject_id = w.subject_id
    ORDER BY s.tenant_id, s.subject_id
    FOR UPDATE OF s
), chain AS (
    SELECT r.tenant_id, r.subject_id, r.ordinal, l.last_sequence + 1 AS sequence, l.last_digest::text AS prev,
           {_link_sql("l.last_digest", "l.last_sequence + 1", "r.content")} AS digest,
           l.head = l.last_sequence AS linked
    FROM r JOIN locked AS l ON l.tenant_id = r.tenant_id AND l.subject_id = r.subject_id
    WHERE r.ordinal = 1
    UNION ALL
    SELECT r.tenant_id, r.subject_id, r.ordinal, c.sequence + 1, c.digest,
           {_link_sql("c.digest", "c.sequence + 1", "r.content")}, c.linked
    FROM chain AS c JOIN r ON r.tenant_id = c.tenant_id AND r.subject_id = c.subject_id AND r.ordinal = c.ordinal + 1
), bumped AS (
    UPDATE {_STREAMS} AS s SET last_sequence = s.last_sequence + l.n,
        last_digest = CASE WHEN c.linked THEN c.digest ELSE s.last_digest END,
        chained_through = CASE WHEN c.linked THEN s.last_sequence + l.n ELSE l.head END
    FROM locked AS l JOIN chain AS c ON c.tenant_id = l.tenant_id AND c.subject_id = l.subject_id AND c.ordinal = l.n
    WHERE s.id = l.id
    RETURNING s.tenant_id, s.subject_id
)
INSERT INTO {_EVENTS} (
    tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at, prev_digest, digest
)
SELECT r.tenant_id, r.subject_id, r.subject::jsonb, r.event_id, r.type, r.payload::jsonb, r.durable,
       c.sequence, r.at, CASE WHEN c.linked THEN c.prev ELSE '' END, CASE WHEN c.linked THEN c.digest ELSE '' END
FROM r JOIN chain AS c ON c.tenant_id = r.tenant_id AND c.subject_id = r.subject_id AND c.ordinal = r.ordinal
JOIN bumped AS b ON b.tenant_id = r.tenant_id AND b.subject_id = r.subject_id
RETURNING event_id, id, sequence, prev_digest, digest
"""  # noqa: S608 (our own table names; every value is a parameter)
