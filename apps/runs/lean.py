"""A short run committed from the event loop: the doors' lean path for `run_create(inline=True)`.

An MCP `tools/call` of an instant workflow is a whole durable run: the row, its events from
`run.started` to `run.completed`, the deliveries they owe. `run_create` writes that through the
ORM on a thread (its compilers cost more CPU than the statements: bench/README.md), so a door on
PostgreSQL builds the very same draft (`services.run_draft`: the same checks, rows and events) and
writes it here, on the loop's own pool, as one transaction of two statements: the row, then every
event in one multi-row INSERT. The tally, the append-only guards and the sequence checks are the
database's own triggers, as for every other insert.

What this path does not take, it hands back (`None`) before anything is written, and the caller
runs `run_create` as before:
- a run that does not settle terminal in memory (an interrupt to open, a node a worker must run);
- a run whose events some delivery is owed for: the tenant has a webhook for one of their types
  (read in the transaction, as `push_deliveries_for_events` reads it; a run nobody has seen yet
  can have no push config of its own).
"""

from __future__ import annotations

import asyncio
import os
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import Field, Model

from apps.agents.models import Workflow
from apps.core.async_db import async_pool
from apps.core.sse import publish_wake_from_loop
from apps.push.models import WebhookEvent
from apps.runs.log import run_wake_group
from apps.runs.models import Run, RunEvent
from apps.runs.services import run_draft
from apps.tenants.subject import Subject


@cache
def _insert_shape(model: type[Model]) -> tuple[tuple[Field[Any, Any], ...], str, str]:
    """The columns a new row writes (all but an auto primary key), the INSERT head, one row's
    placeholders: the statement `Model.save(force_insert=True)` / `bulk_create` would build."""
    ops = connections["default"].ops
    fields = tuple(f for f in model._meta.concrete_fields if not f.primary_key)
    columns = ", ".join(ops.quote_name(str(f.column)) for f in fields)
    head = f"INSERT INTO {ops.quote_name(model._meta.db_table)} ({columns}) VALUES "  # noqa: S608 (our names)
    return fields, head, "(" + ", ".join(["%s"] * len(fields)) + ")"


def _values(obj: Model, fields: tuple[Field[Any, Any], ...]) -> list[Any]:
    """The row's parameters as the ORM prepares them on insert (auto_now stamps, JSON adapters)."""
    connection = connections["default"]
    return [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]


@cache
def _webhooks_wanted_sql() -> str:
    meta = WebhookEvent._meta
    return (
        f"SELECT 1 FROM {meta.db_table} WHERE {meta.get_field('tenant').column} = %s"  # noqa: S608 (our names)
        f" AND {meta.get_field('event_type').column} = ANY(%s) LIMIT 1"
    )


async def run_create_lean(
    *,
    subject: Subject,
    workflow: Workflow,
    inputs: Any,
    transport: str,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Run | None:
    """`run_create(inline=True, workflow=workflow)` for a door on the event loop: the run as
    committed, or None (nothing written) when it is not a short run this path takes."""
    draft = run_draft(
        subject=subject,
        workflow=workflow,
        inputs=inputs,
        transport=transport,
        traceparent=traceparent,
        tracestate=tracestate,
        inline=True,
    )
    run = draft.run
    if draft.handoff or draft.interrupt is not None or not run.is_terminal:
        return None
    run_fields, run_head, run_row = _insert_shape(Run)
    event_fields, event_head, event_row = _insert_shape(RunEvent)
    run_values = _values(run, run_fields)
    event_types = sorted({event.type for event in draft.events})

    async def write() -> bool:
        pool = await async_pool()
        async with pool.connection() as conn, conn.transaction():
            owed = await conn.execute(_webhooks_wanted_sql(), (run.tenant_id, event_types))
            if await owed.fetchone() is not None:
                return False  # leaves by rolling back: nothing was written
            inserted = await conn.execute(f"{run_head}{run_row} RETURNING id", run_values)
            row = await inserted.fetchone()
            assert row is not None
            run.pk = row[0]
            params: list[Any] = []
            for event in draft.events:
                event.run_id = run.pk
                params.extend(_values(event, event_fields))
            await conn.execute(event_head + ", ".join([event_row] * len(draft.events)), params)
        return True

    # Shielded: a client that leaves mid-write must not leave the transaction half-known. The run
    # it commits is terminal, so there is nothing to cancel afterwards (tools.py cancels on leave).
    written = asyncio.ensure_future(write())
    try:
        committed = await asyncio.shield(written)
    except asyncio.CancelledError:
        await asyncio.wait([written])
        raise
    if not committed:
        return None
    run._state.adding = False
    run._state.db = "default"
    for event in draft.events:
        event._state.adding = False
        event._state.db = "default"
    publish_wake_from_loop(run_wake_group(run.run_id))
    if getattr(settings, "OPENWOP_TEST_CRASH_AFTER_COMMIT", False):
        os._exit(70)  # the kill test's seam, as run_create's (services._crash_after_commit_seam)
    return run
