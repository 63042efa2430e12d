"""Durable host events from the event loop, group-committed (DESIGN.md §The hot path).

Every exchange on a protocol door writes its own `negotiation.decided` record before it answers
(interop.md §Negotiation is a protocol). One transaction and one fsync'd commit per exchange is
most of a lean request's cost, so concurrent exchanges share a commit: each request enqueues its
record and awaits the commit of the batch that carries it. Nothing is coalesced: one row per
exchange, each with its own eventId and its own place in its (tenant, subject) stream.

The batch, in ONE transaction on the doors' pool (apps/core/async_db.py):
1. one `UPDATE ... RETURNING` advances every stream of the batch by its count, taking the stream
   rows' locks in (tenant, subject) order first, so two batches (or a batch and the ORM path,
   `services.host_event_append`, which locks one stream) never wait on each other in a cycle; a
   stream that has no row yet gets one (`INSERT ... ON CONFLICT DO NOTHING`) and is advanced then;
2. one multi-row `INSERT` of every record, sequences consecutive per stream in arrival order;
3. `COMMIT`; then every waiter's future resolves, and each stream's subscribers are woken once.

The stream rows stay locked to the commit, as on the ORM path, so a stream's events commit in
sequence order and a reader never sees n+1 before n. A failed batch fails every waiter of that
batch and writes nothing. Group commit needs no timer: while one batch commits, the next one
fills; the first request after a quiet spell is written at once, alone. A request cancelled while
it waits (its client left) does not take its record out of the batch: the decision was made.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from apps.audit.errors import HostEventDeliveryMismatch
from apps.audit.host_event_types import host_event_type
from apps.audit.models import HostEvent, HostEventStream
from apps.audit.streams import host_event_wake_group
from apps.core.async_db import async_pool
from apps.core.ids import mint_opaque
from apps.tenants.subject import Subject

logger = logging.getLogger(__name__)

MAX_BATCH = 256

_EVENTS = HostEvent._meta.db_table
_STREAMS = HostEventStream._meta.db_table

_ADVANCE_SQL = f"""
WITH wanted AS (
  SELECT * FROM unnest(%(tenants)s::bigint[], %(subjects)s::text[], %(counts)s::bigint[]) AS w(tenant_id, subject_id, n)
), locked AS (
  SELECT s.id FROM {_STREAMS} s JOIN wanted w ON s.tenant_id = w.tenant_id AND s.subject_id = w.subject_id
  ORDER BY s.tenant_id, s.subject_id FOR UPDATE OF s
)
UPDATE {_STREAMS} s SET last_sequence = s.last_sequence + w.n
FROM wanted w, locked l
WHERE s.id = l.id AND s.tenant_id = w.tenant_id AND s.subject_id = w.subject_id
RETURNING s.tenant_id, s.subject_id, s.last_sequence
"""  # noqa: S608 (our own table names; every value is a parameter)

_CREATE_SQL = f"""
INSERT INTO {_STREAMS} (tenant_id, subject_id, last_sequence)
SELECT * FROM unnest(%(tenants)s::bigint[], %(subjects)s::text[], %(zeros)s::bigint[])
ORDER BY 1, 2
ON CONFLICT (tenant_id, subject_id) DO NOTHING
"""  # noqa: S608

_INSERT_SQL = f"""
INSERT INTO {_EVENTS} (tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at)
SELECT t, s, subj::jsonb, e, ty, p::jsonb, d, q, a
FROM unnest(%(tenants)s::bigint[], %(subjects)s::text[], %(subject_docs)s::text[], %(event_ids)s::text[],
            %(types)s::text[], %(payloads)s::text[], %(durables)s::bool[], %(sequences)s::bigint[],
            %(ats)s::timestamptz[]) AS r(t, s, subj, e, ty, p, d, q, a)
"""  # noqa: S608


@dataclass
class _Pending:
    tenant_id: int
    subject_id: str
    subject_doc: str
    tenant: str
    event_id: str
    type: str
    payload: str
    durable: bool
    at: datetime
    future: asyncio.Future[None] = field(repr=False)


@dataclass
class BatchStats:
    """What the writer of one event loop has done (tests pin group commit with it)."""

    batches: int = 0
    records: int = 0


class _Writer:
    def __init__(self) -> None:
        self.queue: list[_Pending] = []
        self.flusher: asyncio.Task[None] | None = None
        self.stats = BatchStats()

    def submit(self, pending: _Pending) -> None:
        self.queue.append(pending)
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self.queue:
            batch, self.queue = self.queue[:MAX_BATCH], self.queue[MAX_BATCH:]
            try:
                await _flush(batch)
            except BaseException as exc:  # every waiter of the batch learns it; the next batch goes on
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
                if not isinstance(exc, Exception):
                    raise
                continue
            self.stats.batches += 1
            self.stats.records += len(batch)
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_result(None)
            _wake({host_event_wake_group(tenant=p.tenant, subject_id=p.subject_id) for p in batch})


_writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Writer] = weakref.WeakKeyDictionary()


def _writer() -> _Writer:
    loop = asyncio.get_running_loop()
    writer = _writers.get(loop)
    if writer is None:
        writer = _writers[loop] = _Writer()
    return writer


def batch_stats() -> BatchStats:
    """This event loop's writer's counters (a copy)."""
    stats = _writer().stats
    return BatchStats(batches=stats.batches, records=stats.records)


async def _flush(batch: list[_Pending]) -> None:
    counts = Counter((p.tenant_id, p.subject_id) for p in batch)
    streams = sorted(counts)
    pool = await async_pool()
    async with pool.connection() as conn, conn.transaction():
        last = await _advance(conn, streams, counts)
        missing = [stream for stream in streams if stream not in last]
        if missing:
            await conn.execute(
                _CREATE_SQL,
                {
                    "tenants": [t for t, _ in missing],
                    "subjects": [s for _, s in missing],
                    "zeros": [0] * len(missing),
                },
            )
            last.update(await _advance(conn, missing, counts))
        # Each stream's new range ends at `last`: hand it out in arrival order.
        next_sequence = {stream: last[stream] - counts[stream] + 1 for stream in streams}
        sequences = []
        for pending in batch:
            stream = (pending.tenant_id, pending.subject_id)
            sequences.append(next_sequence[stream])
            next_sequence[stream] += 1
        await conn.execute(
            _INSERT_SQL,
            {
                "tenants": [p.tenant_id for p in batch],
                "subjects": [p.subject_id for p in batch],
                "subject_docs": [p.subject_doc for p in batch],
                "event_ids": [p.event_id for p in batch],
                "types": [p.type for p in batch],
                "payloads": [p.payload for p in batch],
                "durables": [p.durable for p in batch],
                "sequences": sequences,
                "ats": [p.at for p in batch],
            },
        )


async def _advance(conn: Any, streams: list[tuple[int, str]], counts: Counter[tuple[int, str]]) -> dict[Any, int]:
    cursor = await conn.execute(
        _ADVANCE_SQL,
        {
            "tenants": [t for t, _ in streams],
            "subjects": [s for _, s in streams],
            "counts": [counts[stream] for stream in streams],
        },
    )
    return {(int(t), str(s)): int(n) for t, s, n in await cursor.fetchall()}


def _wake(groups: set[str]) -> None:
    """Wake each stream's subscribers once, without holding the batch's waiters (best effort: a
    lost wake-up costs a subscriber its poll interval, never an event)."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    for group in groups:
        task = asyncio.get_running_loop().create_task(_send_wake(layer, group))
        _wakes.add(task)  # held until done (the loop keeps only a weak reference)
        task.add_done_callback(_wakes.discard)


_wakes: set[asyncio.Task[None]] = set()


async def _send_wake(layer: Any, group: str) -> None:
    with contextlib.suppress(Exception):
        await layer.group_send(group, {"type": "log.wake"})


async def host_event_append_batched(*, subject: Subject, type: str, payload: dict[str, Any]) -> str:
    """Append one durable event to the Subject's stream; returns its eventId once COMMITTED.

    The same checks as `services.host_event_append` (a registered type, sent in its class); the
    Subject must carry its tenant's pk (a Subject resolved from a credential does)."""
    registered = host_event_type(type)
    if not registered.durable:
        raise HostEventDeliveryMismatch(f"{type!r} is registered as {registered.delivery}")
    if not isinstance(payload, dict):
        raise TypeError("a host-event payload is a JSON object")
    if subject.tenant_pk is None:
        raise ValueError("a batched host event needs the Subject's tenant pk")
    loop = asyncio.get_running_loop()
    pending = _Pending(
        tenant_id=subject.tenant_pk,
        subject_id=subject.subject_id,
        subject_doc=json.dumps(subject.as_wire()),
        tenant=subject.tenant,
        event_id=mint_opaque(),
        type=type,
        payload=json.dumps(payload),
        durable=True,
        at=datetime.now(UTC),
        future=loop.create_future(),
    )
    # A waiter that went away never reads a failed batch's exception; this does.
    pending.future.add_done_callback(lambda done: done.cancelled() or done.exception())
    _writer().submit(pending)
    # Shielded: a waiter cancelled (client gone) leaves its record in the batch.
    await asyncio.shield(pending.future)
    return pending.event_id
