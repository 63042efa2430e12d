"""Appending to a run's event log, and the one name of a run's wake-up group.

Events are built in memory (`event_new`, which moves the run's `last_sequence`) and written by
`events_write`, the only writer of RunEvent rows: one bulk INSERT for however many events a
transaction appends, the push deliveries they owe, and one wake-up on commit. The caller holds the
run's row lock inside a transaction (or is creating the run in it) and saves the run in the same
transaction (`run_save`), so the row's `last_sequence` and the log advance together: sequence n+1
can only follow n, and the unique (run, sequence) constraint turns any slip into an error rather
than a gap or a duplicate.

Every side effect of committed events lives in `events_recorded` (the metrics, the crash seam),
whichever writer committed them: `events_write` inside an ORM transaction (through
`events_committed`, which wakes the run's listeners first), or `run_insert_settled`, which commits
a whole new settled run as one statement from the event loop and wakes nobody: nobody has its id.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache, partial
from typing import Any

from django.conf import settings
from django.db import connections, models, transaction
from django.db.models import Field, Model
from django.utils import timezone
from psycopg import AsyncConnection

from apps.core.async_db import fetch, statements_on_django_connection
from apps.core.group_commit import GroupCommit, writer_of
from apps.core.ids import mint_opaque, split_bound_id
from apps.core.metrics import run_events_committed
from apps.core.sse import publish_wake, publish_wake_from_loop, wake_group_name
from apps.runs.models import Run, RunEvent

# The log's one extension point: what an app built on runs owes for events as they are written,
# in the same transaction. It is a fan-out, not a placeholder: apps/push (whose delivery rows
# reference the events, so it can never sit below runs) connects its deliveries in its ready();
# the log calls whatever is connected, and runs never imports the apps built on it.
EventsHook = Callable[..., None]
_events_hooks: list[EventsHook] = []
# For each hook, a condition that is true when it may owe something for a new run's events: a
# SELECT naming the tenant's id as `{tenant_id}` and the events' types (text[]) as `{types}`.
_owed_probes: list[str] = []


def on_events_written(hook: EventsHook, *, owed_probe: str) -> None:
    """Call `hook(run=, events=)` inside every `events_write`, after the rows are inserted.
    `owed_probe`: a SELECT (of `{tenant_id}` and `{types}`) that finds a row when the hook may owe
    something for a run nobody has seen yet; `run_insert_settled` writes nothing then, and the
    caller takes `events_write`'s path, which calls the hook."""
    if hook not in _events_hooks:
        _events_hooks.append(hook)
        _owed_probes.append(owed_probe)


def run_wake_group(run_id: str) -> str:
    """The channel-layer group SSE streams and long polls of this run listen on."""
    tenant, _ = split_bound_id(run_id)
    return wake_group_name("run", tenant, run_id)


def event_new(*, run: Run, type: str, payload: dict[str, Any], node_id: str | None = None) -> RunEvent:
    """The run's next event, in memory: its sequence is taken from the run, nothing is written.

    A `node.*` event names its node in the payload as well as on the event (`nodeId`, as the
    reference host writes it): readers that find a node's outcome by `payload.nodeId`, such as the
    OpenWOP conformance suite's ctx.mcp legs, see it there."""
    run.last_sequence += 1
    if node_id and type.startswith("node."):
        payload = {"nodeId": node_id, **payload}
    return RunEvent(
        tenant_id=run.tenant_id,
        run=run,
        sequence=run.last_sequence,
        event_id=mint_opaque(),
        type=type,
        payload=payload,
        node_id=node_id or "",
        at=timezone.now(),
    )


def events_write(*, run: Run, events: Sequence[RunEvent]) -> None:
    """Insert `events` (from `event_new`, in order) in one statement, with the push deliveries
    they owe; one wake-up goes out on commit."""
    if not events:
        return
    RunEvent.objects.for_tenant(run.tenant_id).bulk_create(events)
    transaction.on_commit(partial(events_committed, run, [event.type for event in events]))
    for hook in _events_hooks:  # push deliveries: rows commit with the events; sent on commit
        hook(run=run, events=events)


def events_committed(run: Run, types: list[str]) -> None:
    """Everything that follows the commit of a run's events by `events_write`: one wake-up (a
    hint that new rows are committed; the rows themselves are the data), then `events_recorded`."""
    group = run_wake_group(run.run_id)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        publish_wake(group)
    else:
        publish_wake_from_loop(group)  # the blocking send refuses to run on a loop's thread
    events_recorded(run, types)


def events_recorded(run: Run, types: list[str]) -> None:
    """What follows the commit of a run's events from every writer, woken or not: the metrics
    and the kill test's seam."""
    tenant, _ = split_bound_id(run.run_id)
    run_events_committed(run.transport, types, tenant)
    if getattr(settings, "OPENWOP_TEST_CRASH_AFTER_COMMIT", False):
        # Test-only (tests/crash_after_commit_settings.py, never the host's own settings): the
        # process dies the moment a run's events commit, before any answer
        # (tests/runs/test_live_crash_after_commit.py).
        os._exit(70)


def event_append(*, run: Run, type: str, payload: dict[str, Any], node_id: str | None = None) -> RunEvent:
    """Append one event now (`event_new` + `events_write`)."""
    event = event_new(run=run, type=type, payload=payload, node_id=node_id)
    events_write(run=run, events=[event])
    return event


def run_save(run: Run, *fields: str) -> None:
    """Save `fields` of a locked run, always with the log position it reached."""
    run.save(update_fields=sorted({*fields, "last_sequence", "updated_at"}))


# ---------------------------------------------------------------------------------------------
# A settled run as one statement

# How a column's value (as `Field.pre_save` gives it) is written into the row's JSON document, by
# field class: what PostgreSQL's own input of the column's type then reads back exactly.
_JSON_PLAIN = (models.CharField, models.TextField, models.IntegerField, models.BooleanField, models.JSONField)


def _json_ready(field: Field[Any, Any]) -> Callable[[Any], Any] | None:
    """How `field`'s value goes into the row's JSON document (None: as it is). A field of another
    kind fails when the statement is first built, never by writing a value it cannot read back."""
    if isinstance(field, models.DateTimeField):
        return _timestamp_text
    if isinstance(field, (models.ForeignKey, *_JSON_PLAIN)):  # a foreign key: its target's id
        return None
    raise TypeError(f"{field!r}: no JSON form for a settled run's one-statement insert")


def _timestamp_text(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True)
class _RowShape:
    """The columns a new row writes (all but an auto primary key), each with its JSON form."""

    table: str
    columns: tuple[tuple[Field[Any, Any], str, Callable[[Any], Any] | None], ...]

    def document(self, obj: Model) -> dict[str, Any]:
        """The row as one JSON object, stamped as the ORM's insert stamps it (`pre_save`: auto_now)."""
        row = {}
        for field, column, ready in self.columns:
            value = field.pre_save(obj, True)
            row[column] = value if ready is None else ready(value)
        return row


@cache
def _row_shape(model: type[Model], *, without: str | None = None) -> _RowShape:
    """`model`'s written columns (but `without`, a column the statement fills itself)."""
    fields = (f for f in model._meta.concrete_fields if not f.primary_key and f.column != without)
    return _RowShape(model._meta.db_table, tuple((f, str(f.column), _json_ready(f)) for f in fields))


_RUN_ID_COLUMN = RunEvent._meta.get_field("run").column


@cache
def _settled_runs_sql(probes: tuple[str, ...]) -> str:
    """Runs that settled in memory with all their events, as ONE statement (one transaction in
    autocommit) for however many concurrent callers queued them, whose text never varies with
    their number, so the server prepares it once. Its one parameter is a JSON array with, per run,
    `run` (the row as one object, read as the table's row type: `jsonb_populate_record`), `types`
    (its events' types) and `events` (an array of event rows). A run is written only when no hook
    may owe something for its events (each `owed_probe`, read at the write as `events_write`'s hooks
    read under READ COMMITTED); every event names the id its run's INSERT returned. It answers the
    (run_id, id) of each run written.

    One JSON parameter, not one parameter (or array) per column: the client joins strings instead
    of escaping every value, and the server reads each value with its column's own input (a value
    too long for a varchar column is refused, never cut)."""
    quote = connections["default"].ops.quote_name  # preparing the text only, once per process
    run, event = _row_shape(Run), _row_shape(RunEvent, without=_RUN_ID_COLUMN)
    run_columns = ", ".join(quote(c) for _, c, _ in run.columns)
    unowed = "".join(f" AND NOT EXISTS ({probe.format(tenant_id='c.tenant_id', types='c.types')})" for probe in probes)
    return (
        "WITH c AS (SELECT x->'run' AS run, x->'events' AS events, (x->'run'->>'tenant_id')::bigint AS tenant_id, "  # noqa: S608 (our names; the values are the parameter)
        "ARRAY(SELECT jsonb_array_elements_text(x->'types')) AS types FROM jsonb_array_elements(%s::jsonb) AS x), "
        f"new_run AS (INSERT INTO {quote(run.table)} ({run_columns}) "
        f"SELECT {', '.join('r.' + quote(c) for _, c, _ in run.columns)} "
        f"FROM c, jsonb_populate_record(NULL::{quote(run.table)}, c.run) AS r WHERE true{unowed} "
        f"RETURNING id, {quote('run_id')}), "
        f"new_events AS (INSERT INTO {quote(event.table)} ({quote(_RUN_ID_COLUMN)}, "
        f"{', '.join(quote(c) for _, c, _ in event.columns)}) "
        f"SELECT new_run.id, {', '.join('e.' + quote(c) for _, c, _ in event.columns)} "
        "FROM new_run JOIN c ON c.run->>'run_id' = new_run.run_id, "
        f"jsonb_populate_recordset(NULL::{quote(event.table)}, c.events) AS e) "
        "SELECT run_id, id FROM new_run"
    )


def _json_text(document: Any) -> str:
    """What JSONField itself stores: plain `json.dumps` (no encoder on Run's or RunEvent's JSON)."""
    return json.dumps(document, separators=(",", ":"))


class _SettledRuns(GroupCommit[tuple[str, str], "int | None"]):
    """Settled runs of concurrent callers, group-committed (apps.core.group_commit). An item is one
    run's id and JSON (`run_insert_settled`); its caller gets the run's id, or None when a hook may owe
    something for its events and it was not written. A batch that fails is written again one run
    at a time, so a run the database refuses fails its own caller only."""

    what = "settled-run group commit"

    async def write(self, conn: AsyncConnection[Any], items: list[tuple[str, str]]) -> list[int | BaseException | None]:
        try:
            return list(await self._insert(conn, items))
        except Exception as exc:
            if len(items) == 1:
                return [exc]
        outcomes: list[int | BaseException | None] = []
        for item in items:
            try:
                outcomes.extend(await self._insert(conn, [item]))
            except Exception as exc:
                outcomes.append(exc)
        return outcomes

    async def _insert(self, conn: AsyncConnection[Any], items: list[tuple[str, str]]) -> list[int | None]:
        batch = "[" + ",".join(doc for _, doc in items) + "]"
        async with conn.cursor() as cursor:
            await cursor.execute(_settled_runs_sql(tuple(_owed_probes)), [batch])
            ids = dict(await cursor.fetchall())
        self.stats.committed(len(ids))
        return [ids.get(run_id) for run_id, _ in items]


async def _settled_run_write(item: tuple[str, str]) -> int | None:
    """The run's id once written: group-committed on the loop's pool, or alone on Django's
    connection where the loop's statements take it (`statements_on_django_connection`)."""
    if not statements_on_django_connection():
        return await writer_of(_SettledRuns).submit(item)
    rows = await fetch(_settled_runs_sql(tuple(_owed_probes)), [f"[{item[1]}]"])
    return rows[0][1] if rows else None


async def run_insert_settled(run: Run, events: Sequence[RunEvent]) -> bool:
    """Commit a new run that settled in memory (terminal, nothing left to run or answer) with its
    events, group-committed with concurrent callers' runs in one statement on the event loop's
    pool, then `events_recorded`. False: a hook may owe something for these events (a webhook of the
    tenant's wants one of their types) and nothing was written: the caller commits the run through
    `events_write` instead.

    No wake-up: the run's id is first known from this call's answer, so no stream or long poll
    can be listening on it yet; one opened afterwards reads the committed log from the database."""
    event_shape = _row_shape(RunEvent, without=_RUN_ID_COLUMN)
    item = run.run_id, _json_text({
        "run": _row_shape(Run).document(run),
        "types": sorted({event.type for event in events}),
        "events": [event_shape.document(event) for event in events],
    })  # fmt: skip
    # Shielded: a client that leaves mid-write must not leave the transaction half-known. The run
    # it commits is terminal, so there is nothing to cancel afterwards.
    written = asyncio.ensure_future(_settled_run_write(item))
    try:
        pk = await asyncio.shield(written)
    except asyncio.CancelledError:
        await asyncio.wait([written])
        raise
    if pk is None:
        return False
    run.pk = pk
    run._state.adding, run._state.db = False, "default"
    for event in events:
        event.run_id = run.pk
        event._state.adding, event._state.db = False, "default"
    events_recorded(run, [event.type for event in events])
    return True
