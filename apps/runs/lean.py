"""A short run committed from the event loop: the doors' lean path for `run_create(inline=True)`.

An MCP `tools/call` of an instant workflow is a whole durable run: the row, its events from
`run.started` to `run.completed`, the deliveries they owe. `run_create` writes that through the
ORM on a thread (its compilers cost more CPU than the statements: bench/README.md), so a door on
PostgreSQL builds the very same draft (`services.run_draft`: the same checks, rows and events) and
writes it here, on the loop's own pool, as ONE statement (its own transaction, in autocommit): the
row's INSERT in a CTE, every event in one multi-row INSERT naming the id it returns. The tally and
the append-only guards are the database's own triggers, as for every other insert.

What this path does not take, it hands back (`None`) before anything is written, and the caller
runs `run_create` as before:
- a run that does not settle terminal in memory (an interrupt to open, a node a worker must run);
- a run whose events some delivery is owed for: the tenant has a webhook for one of their types
  (one probe right before the write, as `push_deliveries_for_events` reads it at its INSERT under
  READ COMMITTED; a run nobody has seen yet can have no push config of its own).
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
    event_fields, event_head, _ = _insert_shape(RunEvent)
    params: list[Any] = _values(run, run_fields)
    # The events name their run by the id the row's INSERT returns, in the same statement: one
    # statement is one transaction (autocommit), so the row and its log commit together or not.
    cells = ("(SELECT id FROM new_run)" if f.attname == "run_id" else "%s" for f in event_fields)
    event_row = "(" + ", ".join(cells) + ")"
    for event in draft.events:
        params.extend(value for f, value in zip(event_fields, _values(event, event_fields), strict=True)
                      if f.attname != "run_id")  # fmt: skip
    statement = (
        f"WITH new_run AS ({run_head}{run_row} RETURNING id) "
        f"{event_head}{', '.join([event_row] * len(draft.events))} RETURNING run_id"
    )  # our own names; every value is a parameter
    event_types = sorted({event.type for event in draft.events})

    async def write() -> bool:
        pool = await async_pool()
        async with pool.connection() as conn:
            # Read as push_deliveries_for_events reads it, at the moment of the write (a webhook
            # committed later gets later events, as on the ORM path).
            owed = await conn.execute(_webhooks_wanted_sql(), (run.tenant_id, event_types))
            if await owed.fetchone() is not None:
                return False
            inserted = await conn.execute(statement, params)
            row = await inserted.fetchone()
        assert row is not None
        run.pk = row[0]
        for event in draft.events:
            event.run_id = run.pk
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
