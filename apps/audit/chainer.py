"""The chainer: links records written without digests into their streams' chains, in sequence order,
after the fact (apps/audit/chain.py says why some records arrive without them).

A stream lags when its head (`chained_head`: the last sequence its `last_digest` belongs to) is
behind its counter. Records past the head have empty digests; the chainer takes the stream's row
lock, as every writer does (so nothing is appended to the stream meanwhile), reads the next BATCH
of them in sequence order, computes each link with the one function every writer and the verifier
use (`content_hash`, `link`), seals them (the append-only trigger lets exactly this change through:
empty digests filled in, nothing else touched, migration 0013) and moves the head, then commits and
goes on with the next batch. A batch waits at most LOCK_TIMEOUT for the stream's lock and gives up
to the next run rather than queue the stream's writers behind it. A gap (a record missing past the
head) stops the stream where it is: nothing can be linked across it; `audit_verify` names it.

It runs after the deploy, never inside `migrate`: the beat job (`audit-chain-pending`, apps/audit/tasks.py)
and `manage.py audit_chain`, both logging their progress. Export and expiry chain a tenant's
streams first, and never archive or expire a record that is not chained.

The operator's re-anchor (`chain_reanchor`, from `audit_verify --reanchor`) lives here too: it is
the one other writer of a link, and it links a record of its own.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import OperationalError, connection, transaction
from django.utils import timezone

from apps.audit.chain import chained_head_sql, content_hash, link
from apps.audit.host_event_types import CHAIN_REANCHORED
from apps.audit.models import HostEvent, HostEventStream
from apps.audit.streams import host_event_wake_group
from apps.core.ids import mint_opaque
from apps.core.jobs import job_succeeded
from apps.core.sse import publish_wake
from apps.tenants.models import Tenant

logger = logging.getLogger(__name__)

# The chainer's beat task: its last pass over every stream is recorded under this name (JobStatus).
CHAINER_JOB = "audit.chain_pending"

BATCH = 500  # records sealed per transaction: bounds how long a stream's writers wait on the chainer
LOCK_TIMEOUT = "200ms"  # the longest a batch waits for a stream's lock before leaving it to the next run
PROGRESS_SECONDS = 10.0  # a long backlog logs its progress this often

_EVENTS = HostEvent._meta.db_table
_STREAMS = HostEventStream._meta.db_table
_HEAD = chained_head_sql("s")

_LAGGING_SQL = f"""
SELECT s.id, t.slug, s.subject_id, {_HEAD}, s.last_sequence FROM {_STREAMS} AS s
JOIN {Tenant._meta.db_table} AS t ON t.id = s.tenant_id
WHERE {_HEAD} < s.last_sequence AND (%s::bigint IS NULL OR s.tenant_id = %s::bigint)
ORDER BY s.tenant_id, s.subject_id
"""  # noqa: S608 (our own table names)
_LOCK_SQL = f"""
SELECT s.tenant_id, s.subject_id, s.last_sequence, s.last_digest, {_HEAD} FROM {_STREAMS} AS s
WHERE s.id = %s FOR UPDATE
"""  # noqa: S608
_SEAL_SQL = f"""
UPDATE {_EVENTS} AS e SET prev_digest = v.prev, digest = v.digest
FROM unnest(%s::bigint[], %s::timestamptz[], %s::text[], %s::text[]) AS v(id, at, prev, digest)
WHERE e.id = v.id AND e.at = v.at
"""  # noqa: S608
_HEAD_SQL = f"UPDATE {_STREAMS} SET last_digest = %s, chained_through = %s WHERE id = %s"  # noqa: S608
_COLUMNS = ("id", "at", "sequence", "subject", "event_id", "type", "durable", "payload", "prev_digest", "digest")


@dataclass(slots=True)
class StreamChained:
    """What the chainer did to one stream in one run."""

    tenant: str
    subject_id: str
    linked: int = 0  # records sealed
    head: int = 0  # where the chain reaches now
    last_sequence: int = 0
    stopped: str = ""  # why it is still behind: "busy" (lock timeout) or "gap at sequence N"

    @property
    def caught_up(self) -> bool:
        return self.head >= self.last_sequence

    def line(self) -> str:
        state = "caught up" if self.caught_up else f"behind ({self.stopped})"
        return (
            f"{self.tenant} {self.subject_id!r}: {self.linked} records linked, chained through"
            f" {self.head} of {self.last_sequence}, {state}"
        )


@dataclass(slots=True)
class ChainerRun:
    """One pass over every lagging stream (of one tenant, or all)."""

    streams: list[StreamChained] = field(default_factory=list)

    @property
    def linked(self) -> int:
        return sum(s.linked for s in self.streams)

    @property
    def behind(self) -> list[StreamChained]:
        return [s for s in self.streams if not s.caught_up]

    def lines(self) -> list[str]:
        if not self.streams:
            return ["every stream is chained to its head"]
        return [s.line() for s in self.streams]


def chain_pending(*, tenant: Tenant | None = None) -> ChainerRun:
    """Link every lagging stream (of `tenant`, or every tenant) as far as it goes now."""
    run = ChainerRun()
    tenant_pk = tenant.pk if tenant is not None else None
    with connection.cursor() as cursor:
        cursor.execute(_LAGGING_SQL, [tenant_pk, tenant_pk])
        lagging = cursor.fetchall()
    for stream_id, slug, subject_id, head, last_sequence in lagging:
        result = chain_stream(stream_id, tenant=slug, subject_id=subject_id, head=head, last_sequence=last_sequence)
        run.streams.append(result)
        if result.linked or not result.caught_up:
            log = logger.info if result.caught_up else logger.warning
            log("records chain: %s", result.line())
    if tenant is None:  # a pass over every stream: /metrics' last chainer pass (apps/audit/metrics.py)
        job_succeeded(CHAINER_JOB, {"linked": run.linked, "behind": len(run.behind)})
    return run


def chain_stream(
    stream_id: int, *, tenant: str, subject_id: str, head: int = 0, last_sequence: int = 0
) -> StreamChained:
    """Link one stream's records past its head, BATCH per transaction, until it is caught up, a
    batch finds the stream busy, or a gap stops it."""
    result = StreamChained(tenant=tenant, subject_id=subject_id, head=head, last_sequence=last_sequence)
    reported = time.monotonic()
    while True:
        try:
            sealed, stopped = _chain_batch(stream_id, tenant, result)
        except OperationalError as exc:  # lock_not_available: a writer holds the stream; next run
            logger.info("records chain: %s %r busy (%s)", tenant, subject_id, exc)
            result.stopped = "busy"
            return result
        result.linked += sealed
        if stopped or result.caught_up:
            result.stopped = stopped
            return result
        if time.monotonic() - reported > PROGRESS_SECONDS:
            reported = time.monotonic()
            logger.info("records chain: %s", result.line())


def _chain_batch(stream_id: int, slug: str, result: StreamChained) -> tuple[int, str]:
    """Seal the next batch of one stream in one transaction: (records sealed, why it stopped or "")."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute(_LOCK_SQL, [stream_id])
        row = cursor.fetchone()
        if row is None:
            return 0, "the stream is gone"
        tenant_pk, subject_id, last_sequence, prev, head = row
        result.head, result.last_sequence = head, last_sequence
        if head >= last_sequence:
            return 0, ""
        records = (
            HostEvent.unscoped_all_tenants.filter(
                tenant_id=tenant_pk, subject_id=subject_id, sequence__gt=head, sequence__lte=last_sequence
            )
            .order_by("sequence")
            .values_list(*_COLUMNS)[:BATCH]
        )
        sealed: list[tuple[int, datetime, str, str]] = []
        stopped = ""
        expected = head + 1
        for pk, at, sequence, subject, event_id, type_, durable, payload, prev_digest, digest in records:
            if sequence != expected:
                stopped = f"gap at sequence {expected}"
                break
            if prev_digest or digest:  # sealed past the head: only a hand on the table does that
                stopped = f"sequence {sequence} has digests past the head"
                break
            content = content_hash(
                tenant=slug, subject_id=subject_id, subject=subject, event_id=event_id, type=type_,
                durable=durable, at=at, payload=payload,
            )  # fmt: skip
            digest = link(prev, sequence, content)
            sealed.append((pk, at, prev, digest))
            prev, expected = digest, sequence + 1
        else:
            if not sealed:
                stopped = f"gap at sequence {expected}"
        if sealed:
            cursor.execute(_SEAL_SQL, [list(column) for column in zip(*sealed, strict=True)])
            cursor.execute(_HEAD_SQL, [prev, expected - 1, stream_id])
            result.head = expected - 1
        return len(sealed), stopped


# --- Re-anchoring (an operator's explicit, audited act) ---------------------------------------------


REANCHOR_LOCK_TIMEOUT = "2s"
_REANCHOR_LOCK_SQL = f"""
SELECT s.id, s.last_sequence, s.last_digest FROM {_STREAMS} AS s
WHERE s.tenant_id = %s AND s.subject_id = %s FOR UPDATE
"""  # noqa: S608
_REANCHOR_HEAD_SQL = f"UPDATE {_STREAMS} SET last_sequence = %s, last_digest = %s, chained_through = %s WHERE id = %s"  # noqa: S608


def chain_reanchor(
    *, tenant: Tenant, subject_id: str, reason: str, actor: str, broken_at: int, problem: str
) -> HostEvent:
    """Append a `CHAIN_REANCHORED` record to a broken stream: the stream's chain goes on from it.

    The record links to the stream's head as the database has it (whatever that is: the stream is
    broken), and its payload says who did it, why, and the first break it accepts
    (`brokenAt`, `problem`): `audit_verify` reports the re-anchor ever after, accepts the breaks
    from `brokenAt` up to the record, and still fails on any break before `brokenAt` or after it.
    Records waiting for the chainer are linked first, as far as they go."""
    chain_pending(tenant=tenant)
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{REANCHOR_LOCK_TIMEOUT}'")
        cursor.execute(_REANCHOR_LOCK_SQL, [tenant.pk, subject_id])
        row = cursor.fetchone()
        if row is None:
            raise HostEventStream.DoesNotExist(f"no stream {subject_id!r} in tenant {tenant.slug}")
        stream_id, last_sequence, prev = row
        latest = (
            HostEvent.unscoped_all_tenants.filter(tenant=tenant, subject_id=subject_id)
            .order_by("-sequence")
            .values_list("subject", flat=True)
            .first()
        )
        subject: dict[str, Any] = (
            latest if isinstance(latest, dict) else {"subjectId": subject_id, "tenant": tenant.slug}
        )
        payload = {"reason": reason, "actor": actor, "brokenAt": broken_at, "problem": problem, "previousHead": prev}
        sequence, at, event_id = last_sequence + 1, timezone.now(), mint_opaque()
        content = content_hash(
            tenant=tenant.slug, subject_id=subject_id, subject=subject, event_id=event_id, type=CHAIN_REANCHORED,
            durable=True, at=at, payload=payload,
        )  # fmt: skip
        digest = link(prev, sequence, content)
        event = HostEvent.unscoped_all_tenants.create(
            tenant=tenant, subject_id=subject_id, subject=subject, event_id=event_id, type=CHAIN_REANCHORED,
            payload=payload, durable=True, sequence=sequence, at=at, prev_digest=prev, digest=digest,
        )  # fmt: skip
        cursor.execute(_REANCHOR_HEAD_SQL, [sequence, digest, sequence, stream_id])
        group = host_event_wake_group(tenant=tenant.slug, subject_id=subject_id)
        transaction.on_commit(lambda: publish_wake(group))
    logger.warning(
        "records chain: %s %r re-anchored at sequence %d by %r (accepting sequence %d %s)",
        tenant.slug, subject_id, sequence, actor, broken_at, problem,
    )  # fmt: skip
    return event
