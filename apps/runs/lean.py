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
import re
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import Field, Model

from apps.agents.models import Workflow
from apps.core.async_db import async_pool
from apps.core.metrics import run_events_committed
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


def _event_columns() -> tuple[Field[Any, Any], ...]:
    """RunEvent's written columns but its run, which the statement takes from the new row."""
    return tuple(f for f in _insert_shape(RunEvent)[0] if f.attname != "run_id")


def _unbounded(field: Field[Any, Any]) -> str:
    """The column's type without its length (`varchar(128)` -> `varchar`): an explicit cast to a
    length truncates, while the column's own assignment refuses a value that is too long."""
    return re.sub(r"\(\d+\)", "", str(field.db_type(connections["default"])))


@cache
def _lean_run_sql() -> str:
    """The whole short run as ONE statement (one transaction in autocommit), with a fixed text
    whatever the number of events, so psycopg converts it once and the server prepares it:

    - the Run row's INSERT, guarded by the webhook probe: it writes nothing when the tenant has a
      webhook for one of the run's event types (read at the write, as push_deliveries_for_events
      reads it under READ COMMITTED: a webhook committed later gets later events, as on the ORM
      path). The caller then runs `run_create`, which owes those deliveries;
    - every event from one array per column (unnest), each naming the id the row's INSERT returns.

    Parameters: the run's columns, the tenant and the event types for the probe, one array per
    event column (`_event_columns`). It returns the run's id, or no row when nothing was written.
    """
    connection = connections["default"]
    ops = connection.ops
    run_fields, run_head, _ = _insert_shape(Run)
    webhook = WebhookEvent._meta
    probe = (
        f"SELECT 1 FROM {ops.quote_name(webhook.db_table)}"  # noqa: S608 (our names)
        f" WHERE {ops.quote_name(str(webhook.get_field('tenant').column))} = %s"
        f" AND {ops.quote_name(str(webhook.get_field('event_type').column))} = ANY(%s::text[])"
    )
    # Typed placeholders: in an INSERT ... SELECT nothing else tells the server their types.
    run_row = ", ".join(f"%s::{_unbounded(f)}" for f in run_fields)
    run_insert = run_head.replace(" VALUES ", " ") + f"SELECT {run_row} WHERE NOT EXISTS ({probe})"
    columns = _event_columns()
    names = [f"c{i}" for i in range(len(columns))]
    arrays = ", ".join(f"%s::{_unbounded(f)}[]" for f in columns)
    run_column = ops.quote_name(RunEvent._meta.get_field("run").column)
    event_columns = ", ".join([run_column, *(ops.quote_name(str(f.column)) for f in columns)])
    return (  # our own names; every value is a parameter
        f"WITH new_run AS ({run_insert} RETURNING id) "  # noqa: S608 (our names)
        f"INSERT INTO {ops.quote_name(RunEvent._meta.db_table)} ({event_columns}) "
        f"SELECT new_run.id, {', '.join('e.' + n for n in names)} "
        f"FROM new_run, unnest({arrays}) AS e({', '.join(names)}) "
        f"RETURNING run_id"
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
    if draft.handoff or draft.interrupts or not run.is_terminal:
        return None
    params: list[Any] = [*_values(run, _insert_shape(Run)[0]), run.tenant_id,
                         sorted({event.type for event in draft.events})]  # fmt: skip
    # One array per column (rows transposed): the statement's text never varies.
    event_fields = _event_columns()
    rows = [_values(event, event_fields) for event in draft.events]
    params.extend(list(column) for column in zip(*rows, strict=True))

    async def write() -> bool:
        pool = await async_pool()
        async with pool.connection() as conn:
            inserted = await conn.execute(_lean_run_sql(), params)
            row = await inserted.fetchone()
        if row is None:  # a webhook wants one of these events: nothing was written
            return False
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
    run_events_committed(run.transport, [event.type for event in draft.events], subject.tenant)
    if getattr(settings, "OPENWOP_TEST_CRASH_AFTER_COMMIT", False):
        os._exit(70)  # the kill test's seam, as run_create's (services._crash_after_commit_seam)
    return run
