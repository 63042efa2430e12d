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
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from apps.audit.models import GENESIS, ArchiveExport, HostEvent, HostEventStream
from apps.tenants.models import Tenant

__all__ = [
    "APPEND_SQL", "GENESIS", "AppendRow", "ChainBreak", "ChainReport", "append_params", "canonical_content",
    "canonical_json", "canonical_text", "chain_verify", "content_hash", "content_hash_of_texts", "link",
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
        tenant=tenant, subject_id=subject_id, subject_text=canonical_json(subject), event_id=event_id, type=type,
        durable=durable, at=at, payload_text=canonical_json(payload),
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
# depth is the most records of one stream in the batch). `bumped` moves each counter and head to
# the stream's last record. The statement is one transaction on an autocommit connection and joins
# the caller's on the ORM path; either way it writes all its rows or none, and the locks are held
# to commit, so a reader never sees n+1 before n. A stream with no counter row yet is left out
# (the caller creates the counter and runs the statement again for those rows).
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
    SELECT s.id, s.tenant_id, s.subject_id, s.last_sequence, s.last_digest, w.n FROM {_STREAMS} AS s
    JOIN wanted AS w ON s.tenant_id = w.tenant_id AND s.subject_id = w.subject_id
    ORDER BY s.tenant_id, s.subject_id
    FOR UPDATE OF s
), chain AS (
    SELECT r.tenant_id, r.subject_id, r.ordinal, l.last_sequence + 1 AS sequence, l.last_digest::text AS prev,
           {_link_sql("l.last_digest", "l.last_sequence + 1", "r.content")} AS digest
    FROM r JOIN locked AS l ON l.tenant_id = r.tenant_id AND l.subject_id = r.subject_id
    WHERE r.ordinal = 1
    UNION ALL
    SELECT r.tenant_id, r.subject_id, r.ordinal, c.sequence + 1, c.digest,
           {_link_sql("c.digest", "c.sequence + 1", "r.content")}
    FROM chain AS c JOIN r ON r.tenant_id = c.tenant_id AND r.subject_id = c.subject_id AND r.ordinal = c.ordinal + 1
), bumped AS (
    UPDATE {_STREAMS} AS s SET last_sequence = s.last_sequence + l.n, last_digest = c.digest
    FROM locked AS l JOIN chain AS c ON c.tenant_id = l.tenant_id AND c.subject_id = l.subject_id AND c.ordinal = l.n
    WHERE s.id = l.id
)
INSERT INTO {_EVENTS} (
    tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at, prev_digest, digest
)
SELECT r.tenant_id, r.subject_id, r.subject::jsonb, r.event_id, r.type, r.payload::jsonb, r.durable,
       c.sequence, r.at, c.prev, c.digest
FROM r JOIN chain AS c ON c.tenant_id = r.tenant_id AND c.subject_id = r.subject_id AND c.ordinal = r.ordinal
RETURNING event_id, id, sequence, prev_digest, digest
"""  # noqa: S608 (our own table names; every value is a parameter)


# --- Verification ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first sequence of one stream that is altered or missing."""

    tenant: str
    subject_id: str
    sequence: int
    problem: str  # "altered" or "missing"

    def __str__(self) -> str:
        return f"{self.tenant} {self.subject_id}: sequence {self.sequence} {self.problem}"


@dataclass(slots=True)
class ChainReport:
    records: int = 0
    streams: int = 0
    breaks: list[ChainBreak] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return not self.breaks


@dataclass
class _Walk:
    """One stream being walked: where it starts (after its expired records) and how far it is proved."""

    tenant: str
    subject_id: str
    expected: int  # the next sequence the chain must hold
    prev: str  # the digest that sequence must link to
    broken: ChainBreak | None = None

    def __post_init__(self) -> None:
        self.first = self.expected  # the first kept sequence: the one before it is not a record here

    def fail(self, sequence: int, problem: str) -> None:
        if self.broken is None:
            self.broken = ChainBreak(self.tenant, self.subject_id, sequence, problem)

    def step(self, sequence: int, prev_digest: str, digest: str, content: str, exported: str | None) -> None:
        if self.broken is not None or sequence < self.first:
            # Before the anchor: a record kept only because its instant fell just past a dropped
            # partition's bound (instants are taken before sequences are allocated).
            return
        if sequence != self.expected:
            self.fail(self.expected, "missing" if sequence > self.expected else "altered")
        elif prev_digest != self.prev:
            # The record does not link to the one before: that one was rewritten (digest included),
            # or this one's link was; the first of the two is the first sequence no longer proved.
            self.fail(sequence - 1 if sequence > self.first else sequence, "altered")
        elif link(prev_digest, sequence, content) != digest or exported not in (None, digest):
            self.fail(sequence, "altered")
        self.expected, self.prev = sequence + 1, digest

    def finish(self, last_sequence: int, last_digest: str) -> ChainBreak | None:
        """The kept records end at the stream's head (its counter and last digest)."""
        if self.broken is None:
            if self.expected <= last_sequence:
                self.fail(self.expected, "missing")
            elif self.prev != last_digest:
                self.fail(self.expected - 1, "altered")
        return self.broken


def chain_verify(*, tenant: Tenant | None = None, chunk_size: int = 2000) -> ChainReport:
    """Walk every stream of `tenant` (every tenant if None) in sequence order and recompute each
    link. A stream whose older records expired starts at `HostEventStream.expired_through` with
    `expired_digest` (recorded by the expiry before it dropped them); it ends at `last_sequence`
    and `last_digest`, so a removed or rewritten last record is caught too. The exports' chain
    heads (`ArchiveExport.streams`, held outside the database too) must equal the digest of the
    record they name, or the anchor when that record has expired: rewriting a stream's whole
    chain does not pass either. Reads the records once, streamed: memory follows the number of
    streams and exports, not of records."""
    streams = HostEventStream.unscoped_all_tenants.select_related("tenant").order_by("tenant_id", "subject_id")
    events = HostEvent.unscoped_all_tenants.order_by("tenant_id", "subject_id", "sequence")
    if tenant is not None:
        streams, events = streams.filter(tenant=tenant), events.filter(tenant=tenant)
    heads = {(s.tenant_id, s.subject_id): s for s in streams}
    exported = _export_heads(tenant)
    slugs = {s.tenant_id: s.tenant.slug for s in heads.values()}
    report = ChainReport(streams=len(heads))
    walks: dict[tuple[int, str], _Walk] = {}

    def walk_of(tenant_pk: int, subject_id: str) -> _Walk:
        head = heads.get((tenant_pk, subject_id))
        start, prev = (head.expired_through, head.expired_digest) if head else (0, GENESIS)
        slug = slugs.get(tenant_pk) or Tenant.objects.get(pk=tenant_pk).slug
        return _Walk(slug, subject_id, start + 1, prev)

    columns = ["tenant_id", "subject_id", "subject", "event_id", "type", "durable", "at", "payload",
               "sequence", "prev_digest", "digest"]  # fmt: skip
    for row in events.values_list(*columns).iterator(chunk_size=chunk_size):
        tenant_pk, subject_id, subject, event_id, type_, durable, at, payload, sequence, prev_digest, digest = row
        key = (tenant_pk, subject_id)
        walk = walks.get(key) or walks.setdefault(key, walk_of(tenant_pk, subject_id))
        content = content_hash(
            tenant=walk.tenant, subject_id=subject_id, subject=subject, event_id=event_id, type=type_,
            durable=durable, at=at, payload=payload,
        )
        walk.step(sequence, prev_digest, digest, content, exported.get(key, {}).get(sequence))
        report.records += 1
    for key, head in heads.items():
        walk = walks.get(key) or walk_of(*key)
        anchor_head = exported.get(key, {}).get(head.expired_through)
        if head.expired_through and anchor_head not in (None, head.expired_digest):
            walk.fail(head.expired_through, "altered")
        broken = walk.finish(head.last_sequence, head.last_digest)
        if broken is not None:
            report.breaks.append(broken)
    for key, walk in walks.items():
        if key not in heads:  # records of a stream whose counter is gone: nothing proves their end
            walk.fail(walk.expected, "altered")
            report.breaks.append(walk.broken)  # type: ignore[arg-type]
    return report


def _export_heads(tenant: Tenant | None) -> dict[tuple[int, str], dict[int, str]]:
    """(tenant pk, subject id) -> {last sequence of an export: its chain head}."""
    exports = ArchiveExport.unscoped_all_tenants.all()
    if tenant is not None:
        exports = exports.filter(tenant=tenant)
    heads: dict[tuple[int, str], dict[int, str]] = {}
    for tenant_pk, streams in exports.values_list("tenant_id", "streams"):
        for stream in streams:
            heads.setdefault((tenant_pk, stream["subjectId"]), {})[stream["lastSequence"]] = stream["head"]
    return heads
