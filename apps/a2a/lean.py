"""GetTask from the event loop: one SQL statement on the doors' async pool, no ORM, no thread.

The same read as `selectors.task_view` (run -> open interrupt, artifact payloads up to the row's
`last_sequence`, the task's Messages), written as one statement whose sub-selects ride the same
indexes the ORM path uses, scoped to the caller's tenant exactly as `run_get_readable` scopes it
(interop.md §Isolation: an unknown and a foreign id are the same TaskNotFoundError). The Task is
then projected by the one projection (`wire.task_from_view`), so both paths answer the same bytes.
PostgreSQL only: callers take it only for a lean request (apps/doors) on PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from a2a.types import Task
from a2a.utils.errors import TaskNotFoundError

from apps.a2a.models import TaskMessage
from apps.a2a.wire import InterruptView, TaskView, task_from_view
from apps.core.async_db import async_pool
from apps.runs.models import WAITING_STATUSES, Interrupt, Run, RunEvent

_WAITING = sorted(str(status) for status in WAITING_STATUSES)

_TASK_SQL = f"""
SELECT r.id, r.run_id, r.context_id, r.status, r.updated_at, r.error, r.outputs, r.last_sequence,
  (SELECT json_agg(m.document ORDER BY m.created_at, m.id) FROM {TaskMessage._meta.db_table} m
     WHERE m.run_id = r.id AND m.tenant_id = r.tenant_id),
  (SELECT json_agg(e.payload ORDER BY e.sequence) FROM {RunEvent._meta.db_table} e
     WHERE e.run_id = r.id AND e.tenant_id = r.tenant_id AND e.type = 'artifact.created'
       AND e.sequence <= r.last_sequence),
  CASE WHEN r.status = ANY(%(waiting)s) THEN
    (SELECT json_build_array(i.interrupt_id, i.node_id, i.payload) FROM {Interrupt._meta.db_table} i
       WHERE i.run_id = r.id AND i.tenant_id = r.tenant_id AND i.resolved_at IS NULL
       ORDER BY i.created_at DESC LIMIT 1)
  END
FROM {Run._meta.db_table} r
WHERE r.tenant_id = %(tenant)s AND r.run_id = %(task_id)s
"""  # noqa: S608 (our own table names; every value is a parameter)


def _view(row: tuple[Any, ...], tenant_pk: int) -> TaskView:
    pk, run_id, context_id, status, updated_at, error, outputs, last_sequence, messages, artifacts, interrupt = row
    run = Run(
        pk=pk,
        tenant_id=tenant_pk,
        run_id=run_id,
        context_id=context_id,
        status=status,
        updated_at=updated_at,
        error=error,
        outputs=outputs,
        last_sequence=last_sequence,
    )
    open_interrupt = None
    if interrupt is not None:
        interrupt_id, node_id, payload = interrupt
        open_interrupt = InterruptView(interrupt_id=interrupt_id, node_id=node_id, payload=dict(payload))
    return TaskView(run=run, open_interrupt=open_interrupt, artifacts=artifacts or [], messages=messages or [])


async def task_read(*, tenant_pk: int, task_id: str, history_length: int | None) -> Task:
    """The caller's task as GetTask answers it, or TaskNotFoundError (unknown and foreign alike)."""
    pool = await async_pool()
    async with pool.connection() as conn:
        cursor = await conn.execute(_TASK_SQL, {"tenant": tenant_pk, "task_id": task_id, "waiting": _WAITING})
        row = await cursor.fetchone()
    if row is None:
        raise TaskNotFoundError()
    return task_from_view(_view(row, tenant_pk), history_length=history_length)
