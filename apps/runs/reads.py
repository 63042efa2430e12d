"""The hot reads of the runs tables: each one named function, one SQL text, one typed result.

A2A GetTask and ListTasks, MCP `tasks/get`, REST `GET /runs[/{id}]`, the SSE feed and the long
poll all read through these (one implementation per operation). Each statement runs on
the event loop's pool (`apps.core.async_db.fetch`: no thread, no ORM compilation) or, for a sync
caller (REST, the console, a worker), the same text on Django's connection (`fetch_sync`).

Tenant scoping is in every statement (`tenant_id = %(tenant)s`), exactly as `run_get_readable`
scopes a run: an unknown and a foreign id are the same not-found (interop.md §Isolation).

JSON columns are read as text and parsed here, so both connections give the same values (Django's
connection loads jsonb as text), and timestamps are given in UTC whatever the session's zone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from functools import cache
from typing import Any

from django.conf import settings
from django.core import signing
from django.utils.dateparse import parse_datetime

from apps.agents.models import Workflow
from apps.core.async_db import fetch, fetch_sync
from apps.core.errors import NotFound, ValidationFailed
from apps.runs.models import (
    TERMINAL_STATUSES,
    WAITING_STATUSES,
    Interrupt,
    Run,
    RunEvent,
    RunStatus,
    RunTally,
    run_tally_column,
)

RUN_LIST_MAX_PAGE_SIZE = 100
RUN_LIST_DEFAULT_PAGE_SIZE = 50
_CURSOR_SALT = "openwop.runs.list.cursor"


@dataclass(frozen=True, slots=True)
class OpenInterrupt:
    """The unresolved interrupt a waiting run is suspended on (the newest, when several are open)."""

    interrupt_id: str
    node_id: str
    payload: dict[str, Any]  # InterruptPayload {kind, key, data, resumeSchema}

    @property
    def kind(self) -> str:
        return str(self.payload.get("kind", ""))


@dataclass(frozen=True, slots=True)
class RunRow:
    """The columns of a run every door's projection reads (a model instance costs ~0.2 ms)."""

    pk: int
    tenant_id: int
    run_id: str
    workflow_id: str  # the workflow's own id, not its row's
    context_id: str
    agent_id: str
    transport: str
    status: str
    owner: dict[str, Any]
    current_node_id: str
    error: Any
    outputs: Any
    last_sequence: int
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    completed_at: datetime | None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True, slots=True)
class ArtifactEvent:
    """One `artifact.created` of a run: the node that emitted it and its payload
    `{artifactId, name, parts}`."""

    node_id: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """A run as one statement read it: the row, its open interrupts (oldest first: a parallel
    node opens several at once), its artifacts up to the row's `last_sequence` (a stream resumes
    after it), the documents of the caller's attached table (A2A: the task's Messages;
    `Documents`), oldest first, and, when asked for, its definition as it was created (else None)."""

    run: RunRow
    open_interrupts: tuple[OpenInterrupt, ...]
    artifacts: tuple[ArtifactEvent, ...]
    documents: list[dict[str, Any]]
    definition: Any = None

    @property
    def open_interrupt(self) -> OpenInterrupt | None:
        """The interrupt the run is suspended on: the newest open one."""
        return self.open_interrupts[-1] if self.open_interrupts else None


@dataclass(frozen=True, slots=True)
class Documents:
    """A table of JSON documents attached to runs, which a door above runs owns (A2A's Messages):
    named here by the caller, so runs reads it without importing its app. The table has the
    columns `tenant_id`, `run_id` (the run's row), `document`, `created_at` and `id`."""

    table: str


# A literal in the statements, not a parameter: an array parameter is dumped on every request.
_WAITING = "ARRAY[" + ", ".join(f"'{status}'" for status in sorted(str(s) for s in WAITING_STATUSES)) + "]"


def _columns(documents: Documents | None) -> str:
    """What a snapshot selects from the run `r` and its workflow `w`; `%(artifacts)s` says whether
    the artifacts are read (a list without them skips the sub-select), `%(definition)s` whether
    the run's definition is."""
    attached = "NULL"
    if documents is not None:
        attached = (
            f"(SELECT json_agg(d.document ORDER BY d.created_at, d.id) FROM {documents.table} d"  # noqa: S608
            " WHERE d.run_id = r.id AND d.tenant_id = r.tenant_id)::text"
        )
    return f"""r.id, r.tenant_id, r.run_id, w.workflow_id, r.context_id, r.agent_id, r.transport, r.status,
  r.owner::text, r.current_node_id, r.error::text, r.outputs::text, r.last_sequence,
  r.created_at, r.updated_at, r.started_at, r.completed_at,
  CASE WHEN %(artifacts)s THEN
    (SELECT json_agg(json_build_array(e.node_id, e.payload) ORDER BY e.sequence) FROM {RunEvent._meta.db_table} e
       WHERE e.run_id = r.id AND e.tenant_id = r.tenant_id AND e.type = 'artifact.created'
         AND e.sequence <= r.last_sequence)::text
  END,
  CASE WHEN r.status = ANY({_WAITING}) THEN
    (SELECT json_agg(json_build_array(i.interrupt_id, i.node_id, i.payload) ORDER BY i.created_at, i.id)
       FROM {Interrupt._meta.db_table} i
       WHERE i.run_id = r.id AND i.tenant_id = r.tenant_id AND i.resolved_at IS NULL)::text
  END,
  {attached},
  CASE WHEN %(definition)s THEN r.definition::text END"""  # noqa: S608 (our own table names; every value is a parameter)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _utc(at: datetime | None) -> datetime | None:
    return None if at is None else at.astimezone(UTC)


def _snapshot(row: tuple[Any, ...]) -> RunSnapshot:
    (pk, tenant_id, run_id, workflow_id, context_id, agent_id, transport, status, owner, current_node_id,
     error, outputs, last_sequence, created_at, updated_at, started_at, completed_at,
     artifacts, interrupts, documents, definition) = row  # fmt: skip
    run = RunRow(
        pk=pk, tenant_id=tenant_id, run_id=run_id, workflow_id=workflow_id, context_id=context_id,
        agent_id=agent_id, transport=transport, status=status, owner=json.loads(owner),
        current_node_id=current_node_id, error=_loads(error), outputs=_loads(outputs), last_sequence=last_sequence,
        created_at=created_at.astimezone(UTC), updated_at=updated_at.astimezone(UTC),
        started_at=_utc(started_at), completed_at=_utc(completed_at),
    )  # fmt: skip
    return RunSnapshot(
        run=run,
        open_interrupts=tuple(
            OpenInterrupt(interrupt_id=interrupt_id, node_id=node_id, payload=payload)
            for interrupt_id, node_id, payload in _loads(interrupts) or ()
        ),
        artifacts=tuple(ArtifactEvent(node_id=node, payload=payload) for node, payload in _loads(artifacts) or ()),
        documents=_loads(documents) or [],
        definition=_loads(definition),
    )


# ---------------------------------------------------------------------------------------------
# A run's snapshot


@cache
def _snapshot_sql(documents: Documents | None) -> str:
    return f"""SELECT {_columns(documents)}
FROM {Run._meta.db_table} r JOIN {Workflow._meta.db_table} w ON w.id = r.workflow_id
WHERE r.tenant_id = %(tenant)s AND r.run_id = %(run_id)s"""  # noqa: S608 (our own table names)


def _snapshot_params(tenant_pk: int, run_id: str, artifacts: bool, definition: bool) -> dict[str, Any]:
    return {"tenant": tenant_pk, "run_id": run_id, "artifacts": artifacts, "definition": definition}


def _snapshot_found(rows: list[tuple[Any, ...]]) -> RunSnapshot:
    if not rows:
        raise NotFound("No such run.")
    return _snapshot(rows[0])


async def snapshot_read(
    *, tenant_pk: int, run_id: str, documents: Documents | None = None, artifacts: bool = True, definition: bool = False
) -> RunSnapshot:
    """The tenant's run `run_id`, or NotFound (unknown, malformed and foreign ids alike)."""
    params = _snapshot_params(tenant_pk, run_id, artifacts, definition)
    return _snapshot_found(await fetch(_snapshot_sql(documents), params))


def snapshot_read_sync(
    *, tenant_pk: int, run_id: str, documents: Documents | None = None, artifacts: bool = True, definition: bool = False
) -> RunSnapshot:
    """`snapshot_read` on Django's connection (inside the caller's transaction)."""
    params = _snapshot_params(tenant_pk, run_id, artifacts, definition)
    return _snapshot_found(fetch_sync(_snapshot_sql(documents), params))


# ---------------------------------------------------------------------------------------------
# A page of runs


class RunOrder(StrEnum):
    """`created`: newest run first (runs.md §List). `updated`: newest status change first, the
    order A2A ListTasks requires (the row's updated_at is the status timestamp a Task shows)."""

    CREATED = "created"
    UPDATED = "updated"


_ORDER_COLUMN = {RunOrder.CREATED: "created_at", RunOrder.UPDATED: "updated_at"}


@dataclass(frozen=True, slots=True)
class RunFilters:
    """Which of the tenant's runs a page admits; no filter widens visibility beyond the tenant.

    `statuses`: any of these; `context_id`: the runs of one A2A context, where a run started
    without one is its own context (its runId stands in, as the A2A projection shows it);
    `updated_after`: runs whose status changed at or after it; `open_interrupt_kind` /
    `exclude_open_interrupt_kind`: runs suspended (not suspended) on an open interrupt of that kind."""

    workflow_id: str | None = None
    statuses: tuple[str, ...] | None = None
    context_id: str | None = None
    updated_after: datetime | None = None
    open_interrupt_kind: str | None = None
    exclude_open_interrupt_kind: str | None = None

    def shape(self) -> tuple[bool, ...]:
        """Which filters are set: the statement's text depends on this alone."""
        return (
            self.workflow_id is not None, self.statuses is not None, self.context_id is not None,
            self.updated_after is not None, self.open_interrupt_kind is not None,
            self.exclude_open_interrupt_kind is not None,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class RunPage:
    snapshots: list[RunSnapshot]
    next_cursor: str | None  # None on the last page
    total_size: int | None  # with `count_total`: every run the filters admit, all pages


def _where(shape: tuple[bool, ...], alias: str) -> str:
    """The filters' conditions on the run `alias` (after its tenant's)."""
    workflow, statuses, context, updated_after, with_kind, without_kind = shape
    open_of_kind = (
        f"EXISTS (SELECT 1 FROM {Interrupt._meta.db_table} i WHERE i.run_id = {alias}.id"  # noqa: S608
        f" AND i.tenant_id = {alias}.tenant_id AND i.resolved_at IS NULL AND i.kind = %({{kind}})s)"
    )
    conditions = [f"{alias}.tenant_id = %(tenant)s"]
    if workflow:
        conditions.append(
            f"{alias}.workflow_id IN (SELECT id FROM {Workflow._meta.db_table}"  # noqa: S608
            " WHERE tenant_id = %(tenant)s AND workflow_id = %(workflow)s)"
        )
    if statuses:
        conditions.append(f"{alias}.status = ANY(%(statuses)s::text[])")
    if context:
        own_context = f"({alias}.context_id = '' AND {alias}.run_id = %(context)s)"
        conditions.append(f"({alias}.context_id = %(context)s OR {own_context})")
    if updated_after:
        conditions.append(f"{alias}.updated_at >= %(updated_after)s")
    if with_kind:
        conditions.append(open_of_kind.format(kind="with_kind"))
    if without_kind:
        conditions.append("NOT " + open_of_kind.format(kind="without_kind"))
    return " AND ".join(conditions)


def list_total_bound() -> int:
    """How far a filtered list's total is exact (OPENWOP_LIST_TOTAL_EXACT_UP_TO, issue 49 item 4)."""
    return max(1, int(getattr(settings, "OPENWOP_LIST_TOTAL_EXACT_UP_TO", 10_000)))


def _total_sql(shape: tuple[bool, ...], statuses: tuple[str, ...] | None) -> str:
    """Every run the filters admit. Unfiltered or by status only: the tenant's tally (RunTally,
    per status), flat however many runs it has; any other filter: a count over that filter's
    index (run_list_by_status, run_list_by_context, run_list_status_newest) that stops at
    `list_total_bound()` rows, so a page costs the same with 10k runs or 10M: past the bound the
    total is that bound, a floor (the next page token still leads through every run)."""
    workflow, _, context, updated_after, with_kind, without_kind = shape
    if not (workflow or context or updated_after or with_kind or without_kind):
        columns = ["runs"] if statuses is None else [run_tally_column(s) for s in sorted(set(statuses))] or ["0"]
        return f"SELECT COALESCE(SUM({' + '.join(columns)}), 0) FROM {RunTally._meta.db_table} WHERE tenant_id = %(tenant)s"  # noqa: S608,E501
    return (
        f"SELECT count(*) FROM (SELECT 1 FROM {Run._meta.db_table} c WHERE {_where(shape, 'c')}"  # noqa: S608
        " LIMIT %(total_bound)s) bounded"
    )


@cache
def _page_sql(
    shape: tuple[bool, ...],
    statuses: tuple[str, ...] | None,
    order: RunOrder,
    after: bool,
    total: bool,
    documents: Documents | None,
) -> str:
    """The page, its snapshots and (with `total`) the count in ONE statement. The count is the
    outer row source, so an empty page still answers it: one row whose run columns are NULL."""
    column = _ORDER_COLUMN[order]
    where = _where(shape, "r")
    if after:
        where += f" AND (r.{column} < %(at)s OR (r.{column} = %(at)s AND r.id < %(pk)s))"
    count = f"({_total_sql(shape, statuses)})" if total else "NULL"
    return f"""WITH page AS (
  SELECT r.* FROM {Run._meta.db_table} r WHERE {where} ORDER BY r.{column} DESC, r.id DESC LIMIT %(limit)s
)
SELECT {_columns(documents)}, t.total
FROM (SELECT {count} AS total) t
LEFT JOIN page r ON true LEFT JOIN {Workflow._meta.db_table} w ON w.id = r.workflow_id
ORDER BY r.{column} DESC, r.id DESC"""  # noqa: S608 (our own table names; every value is a parameter)


@dataclass(frozen=True, slots=True)
class _PageQuery:
    sql: str
    params: dict[str, Any]
    limit: int


def _page_query(
    *,
    tenant_pk: int,
    tenant: str,
    filters: RunFilters,
    order: RunOrder,
    limit: int,
    cursor: str | None,
    count_total: bool,
    artifacts: bool,
    documents: Documents | None,
) -> _PageQuery:
    if not 1 <= limit <= RUN_LIST_MAX_PAGE_SIZE:
        raise ValidationFailed(
            f"limit is 1-{RUN_LIST_MAX_PAGE_SIZE}.", details={"field": "limit", "maxPageSize": RUN_LIST_MAX_PAGE_SIZE}
        )
    if filters.statuses is not None and any(s not in RunStatus.values for s in filters.statuses):
        raise ValidationFailed("Unknown run status.", details={"field": "status", "allowed": RunStatus.values})
    params: dict[str, Any] = {
        "tenant": tenant_pk, "limit": limit + 1, "artifacts": artifacts, "definition": False,
        "workflow": filters.workflow_id,
        "statuses": list(filters.statuses or ()), "context": filters.context_id,
        "updated_after": filters.updated_after, "with_kind": filters.open_interrupt_kind,
        "without_kind": filters.exclude_open_interrupt_kind, "total_bound": list_total_bound(),
    }  # fmt: skip
    if cursor is not None:
        params["at"], params["pk"] = run_cursor_position(cursor, tenant=tenant, order=order)
    sql = _page_sql(filters.shape(), filters.statuses, order, cursor is not None, count_total, documents)
    return _PageQuery(sql=sql, params=params, limit=limit)


def _page(rows: list[tuple[Any, ...]], query: _PageQuery, *, tenant: str, order: RunOrder) -> RunPage:
    total = rows[0][-1] if rows else None
    snapshots = [_snapshot(row[:-1]) for row in rows if row[0] is not None]
    more = len(snapshots) > query.limit
    snapshots = snapshots[: query.limit]
    next_cursor = run_cursor_mint(snapshots[-1].run, tenant=tenant, order=order) if more else None
    return RunPage(snapshots=snapshots, next_cursor=next_cursor, total_size=None if total is None else int(total))


async def page_read(
    *,
    tenant_pk: int,
    tenant: str,
    filters: RunFilters = RunFilters(),
    order: RunOrder = RunOrder.CREATED,
    limit: int = RUN_LIST_DEFAULT_PAGE_SIZE,
    cursor: str | None = None,
    count_total: bool = False,
    artifacts: bool = False,
    documents: Documents | None = None,
) -> RunPage:
    """One keyset page of the tenant's runs (listRuns, A2A ListTasks): newest first by `order`.
    A cursor is bound to the tenant (`tenant`, its slug) and the order it was minted for; a
    foreign or forged one is ValidationFailed (runs.md: never trust a foreign cursor)."""
    query = _page_query(
        tenant_pk=tenant_pk, tenant=tenant, filters=filters, order=order, limit=limit, cursor=cursor,
        count_total=count_total, artifacts=artifacts, documents=documents,
    )  # fmt: skip
    return _page(await fetch(query.sql, query.params), query, tenant=tenant, order=order)


def page_read_sync(
    *,
    tenant_pk: int,
    tenant: str,
    filters: RunFilters = RunFilters(),
    order: RunOrder = RunOrder.CREATED,
    limit: int = RUN_LIST_DEFAULT_PAGE_SIZE,
    cursor: str | None = None,
    count_total: bool = False,
    artifacts: bool = False,
    documents: Documents | None = None,
) -> RunPage:
    """`page_read` on Django's connection."""
    query = _page_query(
        tenant_pk=tenant_pk, tenant=tenant, filters=filters, order=order, limit=limit, cursor=cursor,
        count_total=count_total, artifacts=artifacts, documents=documents,
    )  # fmt: skip
    return _page(fetch_sync(query.sql, query.params), query, tenant=tenant, order=order)


def run_cursor_mint(run: RunRow, *, tenant: str, order: RunOrder) -> str:
    position = getattr(run, _ORDER_COLUMN[order]).isoformat()
    return signing.dumps({"t": tenant, "o": str(order), "c": position, "i": run.pk}, salt=_CURSOR_SALT, compress=True)


def run_cursor_position(cursor: str, *, tenant: str, order: RunOrder) -> tuple[datetime, int]:
    """A cursor this host minted for this tenant and order, or 400 (runs.md: never trust a
    foreign cursor)."""
    try:
        data = signing.loads(cursor, salt=_CURSOR_SALT)
        position = parse_datetime(data["c"])
        if data["t"] != tenant or data.get("o", RunOrder.CREATED) != order:
            raise ValueError("cursor of another tenant or order")
        if position is None or not isinstance(data["i"], int):
            raise ValueError("malformed cursor")
    except (signing.BadSignature, KeyError, TypeError, ValueError) as exc:
        raise ValidationFailed("The cursor was not minted by this host.", details={"field": "cursor"}) from exc
    return position, data["i"]


# ---------------------------------------------------------------------------------------------
# Events after a sequence

_EVENTS_AFTER_SQL = f"""SELECT id, sequence, event_id, type, payload::text, node_id, at
FROM {RunEvent._meta.db_table}
WHERE tenant_id = %(tenant)s AND run_id = %(run)s AND sequence > %(after)s ORDER BY sequence"""  # noqa: S608


def _events(rows: list[tuple[Any, ...]], tenant_pk: int, run_pk: int) -> list[RunEvent]:
    return [
        RunEvent(
            id=pk,
            tenant_id=tenant_pk,
            run_id=run_pk,
            sequence=sequence,
            event_id=event_id,
            type=type_,
            payload=json.loads(payload),
            node_id=node_id,
            at=at.astimezone(UTC),
        )
        for pk, sequence, event_id, type_, payload, node_id, at in rows
    ]


async def events_after(*, tenant_pk: int, run_pk: int, after: int) -> list[RunEvent]:
    """The run's events with sequence > `after`, in order (the SSE feed, the long poll, A2A
    streams). `run_pk` is a row the caller already read as readable, in `tenant_pk`."""
    rows = await fetch(_EVENTS_AFTER_SQL, {"tenant": tenant_pk, "run": run_pk, "after": after})
    return _events(rows, tenant_pk, run_pk)


def events_after_sync(*, tenant_pk: int, run_pk: int, after: int) -> list[RunEvent]:
    """`events_after` on Django's connection (a worker, the console, MCP notifications)."""
    rows = fetch_sync(_EVENTS_AFTER_SQL, {"tenant": tenant_pk, "run": run_pk, "after": after})
    return _events(rows, tenant_pk, run_pk)
