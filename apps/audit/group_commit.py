"""Group commit of durable host events (apps.core.group_commit): concurrent appends from the event
loop share one statement and one commit, and each caller awaits the commit of its own row.

Every A2A and MCP exchange records its `negotiation.decided` before it answers (interop.md
§The audit event). On the ORM path (`apps.audit.services.host_event_append`) each record pays its
own transaction and its own fsync'd commit. Here the records of concurrent exchanges are written
together: one row per exchange, never coalesced, but one statement and one commit per batch.

- The batch is ONE statement, `apps.audit.chain.APPEND_SQL` (what it locks, in which order, and
  why it never leaves a gap: see there), on an autocommit connection, so the statement is its own
  transaction: it commits or fails whole, and `host_event_append` interleaves with it gap-free.
  Within a stream, the sequences follow arrival order.
- A stream with no counter row yet is left out by that statement; its counter is created
  (`INSERT ... ON CONFLICT DO NOTHING`) and its rows go in a second statement of the same flush.
- After the commit one wake-up per distinct stream is handed to the channel layer without being
  waited for. If the statement fails, every waiter of the batch gets its exception.
- A caller that goes away (a client disconnect cancels its task) does not take its record with it:
  the event was decided and queued, and the batch is written regardless.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from apps.audit.chain import APPEND_SQL, AppendRow, append_params
from apps.audit.models import HostEventStream
from apps.audit.services import host_event_row
from apps.audit.streams import host_event_wake_group
from apps.core.group_commit import GroupCommit, writer_of
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


class HostEventBatcher(GroupCommit[AppendRow, str]):
    """The group-commit writer of host events on one event loop (`host_event_batcher()`): each
    caller gets its event id once its row is committed."""

    what = "host-event group commit"

    async def write(self, conn: AsyncConnection[Any], items: list[AppendRow]) -> list[str | BaseException]:
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

    async def _append_rows(self, conn: AsyncConnection[Any], rows: list[AppendRow]) -> set[str]:
        """Run `APPEND_SQL` for `rows`; the ids it committed (rows of streams with no counter yet
        are left out)."""
        async with conn.cursor() as cursor:
            await cursor.execute(APPEND_SQL, append_params(rows))
            written = {row[0] for row in await cursor.fetchall()}
        self.stats.committed(len(written))
        return written


async def _with_tenant_pks(conn: AsyncConnection[Any], batch: list[AppendRow]) -> list[AppendRow]:
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


def _outcome(pending: AppendRow, committed: set[str]) -> str | BaseException:
    """What the caller of `pending` gets: its event id, or why its row was not written (an
    unknown tenant fails its own waiter only)."""
    if pending.event_id in committed:
        return pending.event_id
    if pending.tenant_pk is None:
        return Tenant.DoesNotExist(f"no tenant {pending.tenant!r}")
    return RuntimeError("a host-event stream counter vanished while being created")


def _woken(batch: list[AppendRow], committed: set[str]) -> None:
    """One wake-up per stream with committed rows, handed to the channel layer without waiting."""
    groups = dict.fromkeys((p.tenant, p.subject_id) for p in batch if p.event_id in committed)
    for tenant, subject_id in groups:
        publish_wake_from_loop(host_event_wake_group(tenant=tenant, subject_id=subject_id))


def host_event_batcher() -> HostEventBatcher:
    """The running loop's batcher (its pool connections are bound to that loop)."""
    return writer_of(HostEventBatcher)


async def host_event_append_batched(*, subject: Subject, type: str, payload: dict[str, Any]) -> str:
    """Append one durable event to the Subject's stream, group-committed with concurrent appends;
    returns its event id once its row is committed (readable from any connection).

    Refuses what `host_event_append` refuses, before queueing: an unregistered type, an ephemeral
    one (an ephemeral event is never awaited for durability), a payload that is not a JSON object."""
    pending = host_event_row(subject=subject, type=type, payload=payload, durable=True)
    # Nothing above awaits, so once this coroutine runs the event is queued before any cancellation
    # can reach it: a decided exchange always leaves its record.
    return await host_event_batcher().submit(pending)
