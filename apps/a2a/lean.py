"""GetTask and ListTasks from the event loop: one SQL statement on the doors' async pool, no ORM,
no thread.

The same read as `selectors.task_view` (run -> open interrupt, artifact payloads up to the row's
`last_sequence`, the task's Messages), written as one statement whose sub-selects ride the same
indexes the ORM path uses, scoped to the caller's tenant exactly as `run_get_readable` scopes it
(interop.md §Isolation: an unknown and a foreign id are the same TaskNotFoundError). The Task is
then projected by the one projection (`wire.task_from_view`), so both paths answer the same bytes.
PostgreSQL only: callers take it only for a lean request (apps/doors) on PostgreSQL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from a2a.types import Task
from a2a.utils.errors import TaskNotFoundError

from apps.a2a.errors import invalid_params
from apps.a2a.models import TaskMessage
from apps.a2a.wire import InterruptView, TaskView, task_from_view, to_wire
from apps.core.async_db import async_pool
from apps.core.errors import ValidationFailed
from apps.runs.models import WAITING_STATUSES, Interrupt, Run, RunEvent, RunTally
from apps.runs.selectors import RunOrder, run_cursor_mint, run_cursor_position
from apps.tenants.subject import Subject

# A literal in the statement, not a parameter: an array parameter is dumped on every request.
_WAITING = "ARRAY[" + ", ".join(f"'{status}'" for status in sorted(str(s) for s in WAITING_STATUSES)) + "]"

_TASK_SQL = f"""
SELECT r.id, r.run_id, r.context_id, r.status, r.updated_at, r.error::text, r.outputs::text, r.last_sequence,
  (SELECT json_agg(m.document ORDER BY m.created_at, m.id) FROM {TaskMessage._meta.db_table} m
     WHERE m.run_id = r.id AND m.tenant_id = r.tenant_id)::text,
  (SELECT json_agg(e.payload ORDER BY e.sequence) FROM {RunEvent._meta.db_table} e
     WHERE e.run_id = r.id AND e.tenant_id = r.tenant_id AND e.type = 'artifact.created'
       AND e.sequence <= r.last_sequence)::text,
  CASE WHEN r.status = ANY({_WAITING}) THEN
    (SELECT json_build_array(i.interrupt_id, i.node_id, i.payload) FROM {Interrupt._meta.db_table} i
       WHERE i.run_id = r.id AND i.tenant_id = r.tenant_id AND i.resolved_at IS NULL
       ORDER BY i.created_at DESC LIMIT 1)::text
  END
FROM {Run._meta.db_table} r
WHERE r.tenant_id = %(tenant)s AND r.run_id = %(task_id)s
"""  # noqa: S608 (our own table names; every value is a parameter)


@dataclass(frozen=True, slots=True)
class _RunRow:
    """The columns of a run the Task projection reads (a model instance costs ~0.2 ms to build)."""

    pk: int
    tenant_id: int
    run_id: str
    context_id: str
    status: str
    updated_at: datetime
    error: Any
    outputs: Any
    last_sequence: int


def _view(row: tuple[Any, ...], tenant_pk: int) -> TaskView:
    pk, run_id, context_id, status, updated_at, error, outputs, last_sequence, messages, artifacts, interrupt = row
    run = cast(Run, _RunRow(pk, tenant_pk, run_id, context_id, status, updated_at, error, outputs, last_sequence))
    open_interrupt = None
    if interrupt is not None:
        interrupt_id, node_id, payload = interrupt
        open_interrupt = InterruptView(interrupt_id=interrupt_id, node_id=node_id, payload=dict(payload))
    return TaskView(run=run, open_interrupt=open_interrupt, artifacts=artifacts or [], messages=messages or [])


async def _task_row(tenant_pk: int, task_id: str) -> tuple[Any, ...]:
    """The task's row, its JSON columns as text (parsed only when projected), or TaskNotFoundError."""
    pool = await async_pool()
    async with pool.connection() as conn:
        cursor = await conn.execute(_TASK_SQL, {"tenant": tenant_pk, "task_id": task_id})
        row = await cursor.fetchone()
    if row is None:
        raise TaskNotFoundError()
    return cast(tuple[Any, ...], row)


def _parsed(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The row as the JSON-typed read gives it: its text columns parsed (NULL stays None)."""
    pk, run_id, context_id, status, updated_at, error, outputs, last_sequence, messages, artifacts, interrupt = row
    loads = json.loads
    return (
        pk, run_id, context_id, status, updated_at,
        None if error is None else loads(error), None if outputs is None else loads(outputs), last_sequence,
        None if messages is None else loads(messages), None if artifacts is None else loads(artifacts),
        None if interrupt is None else loads(interrupt),
    )  # fmt: skip


async def task_read(*, tenant_pk: int, task_id: str, history_length: int | None) -> Task:
    """The caller's task as GetTask answers it, or TaskNotFoundError (unknown and foreign alike)."""
    row = await _task_row(tenant_pk, task_id)
    return task_from_view(_view(_parsed(row), tenant_pk), history_length=history_length)


@dataclass(frozen=True, slots=True)
class TaskDoc:
    """A Task already in its wire form (`wire.to_wire(task)`): answered as is, never modified."""

    doc: dict[str, Any]


# The wire form of a Task is a pure function of its row (and historyLength): a task polled again
# without a change projects to the same document, so the projection is kept, keyed by everything it
# reads. The read itself (and so isolation and freshness) happens on every request; only the
# protobuf round trip of an unchanged row is skipped. Bounded in bytes; big tasks are not kept.
_PROJECTION_BUDGET_BYTES = 32 * 1024 * 1024
_PROJECTION_MAX_ROW_BYTES = 64 * 1024
_projections: dict[tuple[Any, ...], tuple[TaskDoc, int]] = {}
_projection_bytes = 0


def _row_size(row: tuple[Any, ...]) -> int:
    return sum(len(value) for value in row if isinstance(value, str))


def _keep(key: tuple[Any, ...], doc: TaskDoc, size: int) -> None:
    global _projection_bytes
    while _projections and _projection_bytes + size > _PROJECTION_BUDGET_BYTES:
        _, evicted = _projections.pop(next(iter(_projections)))  # the oldest kept
        _projection_bytes -= evicted
    _projections[key] = (doc, size)
    _projection_bytes += size


async def task_doc_read(*, tenant_pk: int, task_id: str, history_length: int | None) -> TaskDoc:
    """`task_read` in wire form: what GetTask answers."""
    row = await _task_row(tenant_pk, task_id)
    key = (tenant_pk, history_length, *row)
    kept = _projections.get(key)
    if kept is not None:
        return kept[0]
    task = task_from_view(_view(_parsed(row), tenant_pk), history_length=history_length)
    doc = TaskDoc(to_wire(task))
    size = _row_size(row) * 3  # the key's text and the document built from it
    if size <= _PROJECTION_MAX_ROW_BYTES * 3:
        _keep(key, doc, size)
    return doc


# ---------------------------------------------------------------------------------------------
# ListTasks without filters: one statement for the page, its Messages, open interrupts and the total

_PAGE_SQL = f"""
WITH page AS (
  SELECT r.id, r.run_id, r.context_id, r.status, r.updated_at, r.error, r.outputs, r.last_sequence, r.tenant_id
  FROM {Run._meta.db_table} r
  WHERE r.tenant_id = %(tenant)s {{after}}
  ORDER BY r.updated_at DESC, r.id DESC
  LIMIT %(limit)s
)
SELECT p.id, p.run_id, p.context_id, p.status, p.updated_at, p.error, p.outputs, p.last_sequence,
  (SELECT json_agg(m.document ORDER BY m.created_at, m.id) FROM {TaskMessage._meta.db_table} m
     WHERE m.run_id = p.id AND m.tenant_id = p.tenant_id),
  CASE WHEN %(artifacts)s THEN
    (SELECT json_agg(e.payload ORDER BY e.sequence) FROM {RunEvent._meta.db_table} e
       WHERE e.run_id = p.id AND e.tenant_id = p.tenant_id AND e.type = 'artifact.created'
         AND e.sequence <= p.last_sequence)
  END,
  CASE WHEN p.status = ANY({_WAITING}) THEN
    (SELECT json_build_array(i.interrupt_id, i.node_id, i.payload) FROM {Interrupt._meta.db_table} i
       WHERE i.run_id = p.id AND i.tenant_id = p.tenant_id AND i.resolved_at IS NULL
       ORDER BY i.created_at DESC LIMIT 1)
  END,
  (SELECT COALESCE(SUM(t.runs), 0) FROM {RunTally._meta.db_table} t WHERE t.tenant_id = %(tenant)s)
FROM page p
ORDER BY p.updated_at DESC, p.id DESC
"""  # noqa: S608 (our own table names; every value is a parameter)
_PAGE_FIRST = _PAGE_SQL.replace("{after}", "")
_PAGE_AFTER = _PAGE_SQL.replace("{after}", "AND (r.updated_at < %(at)s OR (r.updated_at = %(at)s AND r.id < %(pk)s))")
_TOTAL_SQL = f"SELECT COALESCE(SUM(runs), 0) FROM {RunTally._meta.db_table} WHERE tenant_id = %(tenant)s"  # noqa: S608


@dataclass(frozen=True, slots=True)
class LeanPage:
    views: list[TaskView]
    next_page_token: str
    total_size: int


async def task_page_read(
    *, subject: Subject, tenant_pk: int, page_size: int, page_token: str | None, include_artifacts: bool
) -> LeanPage:
    """`selectors.task_page` for a ListTasks with no filter: the same rows, order, cursor and total
    (`run_list(order=UPDATED, count_total=True)` reads the tenant's tally when unfiltered too)."""
    params: dict[str, Any] = {
        "tenant": tenant_pk,
        "limit": page_size + 1,
        "artifacts": include_artifacts,
    }
    sql = _PAGE_FIRST
    if page_token:
        try:
            params["at"], params["pk"] = run_cursor_position(page_token, tenant=subject.tenant, order=RunOrder.UPDATED)
        except ValidationFailed:
            raise invalid_params("The pageToken was not minted by this host.", field="pageToken") from None
        sql = _PAGE_AFTER
    pool = await async_pool()
    async with pool.connection() as conn:
        rows = await (await conn.execute(sql, params)).fetchall()
        if rows:
            total = int(rows[0][-1])
        else:
            total = int((await (await conn.execute(_TOTAL_SQL, {"tenant": tenant_pk})).fetchone() or (0,))[0])
    more = len(rows) > page_size
    views = [_view(row[:-1], tenant_pk) for row in rows[:page_size]]
    token = run_cursor_mint(views[-1].run, tenant=subject.tenant, order=RunOrder.UPDATED) if more else ""
    return LeanPage(views=views, next_page_token=token, total_size=total)
