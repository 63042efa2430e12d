"""Group commit of durable host events (apps.core.group_commit): concurrent appends from the event
loop share one statement and one commit, and each caller awaits the commit of its own row.

Every A2A and MCP exchange records its `negotiation.decided` before it answers (interop.md
§The audit event). On the ORM path (`apps.audit.services.host_event_append`) each record pays its
own transaction and its own fsync'd commit. Here the records of concurrent exchanges are written
together: one row per exchange, never coalesced, but one statement and one commit per batch.

- The batch is ONE statement, `apps.audit.chain.APPEND_SQL`, on an autocommit connection, so the
  statement is its own transaction: it locks the stream rows it needs in (tenant, subject) order,
  advances each counter by its number of rows, links each row into its stream's hash chain and
  inserts every row with its sequence (arrival order within a stream). It commits or fails whole:
  no record half-written, no gap in any stream. The row locks are held to that commit, so a
  reader never sees n+1 before n, and `host_event_append` (which locks one stream per
  transaction) interleaves with it gap-free, in either order.
- A stream with no counter row yet is left out by that statement; its counter is created
  (`INSERT ... ON CONFLICT DO NOTHING`) and its rows go in a second statement of the same flush.
- After the commit one wake-up per distinct stream is handed to the channel layer without being
  waited for. If the statement fails, every waiter of the batch gets its exception.
- A caller that goes away (a client disconnect cancels its task) does not take its record with it:
  the event was decided and queued, and the batch is written regardless.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from django.utils import timezone
from psycopg import AsyncConnection

from apps.audit.chain import APPEND_SQL, canonical_json, content_hash_of_texts
from apps.audit.errors import HostEventDeliveryMismatch
from apps.audit.host_event_types import host_event_type
from apps.audit.models import HostEventStream
from apps.audit.streams import host_event_wake_group
from apps.core.group_commit import GroupCommit, writer_of
from apps.core.ids import mint_opaque
from apps.core.sse import publish_wake_from_loop
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject

_STREAMS = HostEventStream._meta.db_table
_TENANTS = Tenant._meta.db_table

_STREAMS_CREATE_SQL = f"""
INSERT INTO {_STREAMS} (tenant_id, subject_id, last_sequence)
SELECT v.tenant_id, v.subject_id, 0 FROM unnest(%s::bigint[], %s::text[]) AS v(tenant_id, subject_id)
ORDER BY v.tenant_id, v.subject_id
ON CONFLICT (tenant_id, subject_id) DO NOTHING
"""  # noqa: S608 (our own table name)

_TENANT_PKS_SQL = f"SELECT slug, id FROM {_TENANTS} WHERE slug = ANY(%s::text[])"  # noqa: S608


@dataclass(slots=True, eq=False)
class _Pending:
    """One queued event, serialised by its caller (a bad payload fails its own request only)."""

    tenant: str
    tenant_pk: int | None
    subject_id: str
    subject_json: str
    event_id: str
    type: str
    payload_json: str
    at: datetime
    content: str  # the hash chain's content hash (apps/audit/chain.py), computed before queueing


class HostEventBatcher(GroupCommit[_Pending, str]):
    """The group-commit writer of host events on one event loop (`host_event_batcher()`): each
    caller gets its event id once its row is committed."""

    what = "host-event group commit"

    async def write(self, conn: AsyncConnection[Any], items: list[_Pending]) -> list[str | BaseException]:
        batch = await _with_tenant_pks(conn, items)
        committed: set[str] = set()
        if batch:
            committed = await self._append_rows(conn, batch)
            rest = [pending for pending in batch if pending.event_id not in committed]
            if rest:  # first events of their streams: create the counters, then write those rows
                async with conn.cursor() as cursor:
                    await cursor.execute(
                        _STREAMS_CREATE_SQL, [[p.tenant_pk for p in rest], [p.subject_id for p in rest]]
                    )
                committed |= await self._append_rows(conn, rest)
            _woken(batch, committed)
        return [_outcome(pending, committed) for pending in items]

    async def _append_rows(self, conn: AsyncConnection[Any], rows: list[_Pending]) -> set[str]:
        """Run `APPEND_SQL` for `rows`; the ids it committed (rows of streams with no counter yet
        are left out)."""
        ordinals: dict[tuple[int | None, str], int] = {}
        ordinal: list[int] = []
        for pending in rows:  # sequence order within a stream = arrival order
            key = (pending.tenant_pk, pending.subject_id)
            ordinals[key] = ordinals.get(key, 0) + 1
            ordinal.append(ordinals[key])
        params = {
            "tenant_id": [p.tenant_pk for p in rows],
            "subject_id": [p.subject_id for p in rows],
            "subject": [p.subject_json for p in rows],
            "event_id": [p.event_id for p in rows],
            "type": [p.type for p in rows],
            "payload": [p.payload_json for p in rows],
            "durable": [True] * len(rows),
            "ordinal": ordinal,
            "at": [p.at for p in rows],
            "content": [p.content for p in rows],
        }
        async with conn.cursor() as cursor:
            await cursor.execute(APPEND_SQL, params)
            written = {row[0] for row in await cursor.fetchall()}
        self.stats.committed(len(written))
        return written


async def _with_tenant_pks(conn: AsyncConnection[Any], batch: list[_Pending]) -> list[_Pending]:
    """Fill in the tenant pk of Subjects built without one (one query for the batch, only when
    needed: a Subject read from an API key carries it); the events whose tenant is known."""
    slugs = sorted({pending.tenant for pending in batch if pending.tenant_pk is None})
    if not slugs:
        return batch
    async with conn.cursor() as cursor:
        await cursor.execute(_TENANT_PKS_SQL, [slugs])
        pks = {slug: pk for slug, pk in await cursor.fetchall()}
    for pending in batch:
        if pending.tenant_pk is None:
            pending.tenant_pk = pks.get(pending.tenant)
    return [pending for pending in batch if pending.tenant_pk is not None]


def _outcome(pending: _Pending, committed: set[str]) -> str | BaseException:
    """What the caller of `pending` gets: its event id, or why its row was not written (an
    unknown tenant fails its own waiter only)."""
    if pending.event_id in committed:
        return pending.event_id
    if pending.tenant_pk is None:
        return Tenant.DoesNotExist(f"no tenant {pending.tenant!r}")
    return RuntimeError("a host-event stream counter vanished while being created")


def _woken(batch: list[_Pending], committed: set[str]) -> None:
    """One wake-up per stream with committed rows, handed to the channel layer without waiting."""
    groups = dict.fromkeys((p.tenant, p.subject_id) for p in batch if p.event_id in committed)
    for tenant, subject_id in groups:
        publish_wake_from_loop(host_event_wake_group(tenant=tenant, subject_id=subject_id))


def host_event_batcher() -> HostEventBatcher:
    """The running loop's batcher (its pool connections are bound to that loop)."""
    return writer_of(HostEventBatcher)


@lru_cache(maxsize=1024)
def _subject_json(subject: Subject) -> str:
    """A Subject's wire JSON in canonical form (the row stores it, the chain hashes it), serialised
    once per Subject: every exchange records one event, and a caller is the same Subject request
    after request (its wire form is exactly what equality compares, so equal Subjects share it)."""
    return canonical_json(subject.as_wire())


async def host_event_append_batched(*, subject: Subject, type: str, payload: dict[str, Any]) -> str:
    """Append one durable event to the Subject's stream, group-committed with concurrent appends;
    returns its event id once its row is committed (readable from any connection).

    Refuses what `host_event_append` refuses, before queueing: an unregistered type, an ephemeral
    one (an ephemeral event is never awaited for durability), a payload that is not a JSON object."""
    registered = host_event_type(type)
    if not registered.durable:
        raise HostEventDeliveryMismatch(f"{type!r} is registered as {registered.delivery}")
    if not isinstance(payload, dict):
        raise TypeError("a host-event payload is a JSON object")
    event_id, at = mint_opaque(), timezone.now()
    subject_json, payload_json = _subject_json(subject), canonical_json(payload)  # stored and hashed
    pending = _Pending(
        tenant=subject.tenant,
        tenant_pk=subject.tenant_pk,
        subject_id=subject.subject_id,
        subject_json=subject_json,
        event_id=event_id,
        type=type,
        payload_json=payload_json,
        at=at,
        content=content_hash_of_texts(
            tenant=subject.tenant, subject_id=subject.subject_id, subject_text=subject_json, event_id=event_id,
            type=type, durable=True, at=at, payload_text=payload_json,
        ),
    )
    # Nothing above awaits, so once this coroutine runs the event is queued before any cancellation
    # can reach it: a decided exchange always leaves its record.
    return await host_event_batcher().submit(pending)
