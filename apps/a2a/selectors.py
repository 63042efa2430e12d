"""Reads for the A2A door. A task is a run read with its Messages (apps/runs/reads.py, the
Messages named by `TASK_MESSAGES`), scoped to the caller's tenant: unknown, malformed, foreign and
purged ids all take one path and get the same bytes (interop.md §Isolation).

`task_page` (ListTasks) is `runs.reads.page_read`, the listRuns read, with the A2A filters
translated: contextId, the inverse task-state projection and the status timestamp; so ListTasks
returns exactly what listRuns returns to the same Subject (interop.md §Isolation).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from a2a.types import TaskState
from a2a.utils.errors import TaskNotFoundError

from apps.a2a.errors import invalid_params
from apps.a2a.models import SkillRoute, SkillRoutePin, TaskMessage
from apps.core.errors import NotFound, ValidationFailed
from apps.facets.models import Facet
from apps.runs.models import InterruptKind, Run, RunStatus
from apps.runs.reads import Documents, RunFilters, RunOrder, RunSnapshot, page_read, snapshot_read
from apps.runs.selectors import run_get_readable
from apps.tenants.selectors import asubject_tenant_pk, subject_tenant_pk
from apps.tenants.subject import Subject

# The task's Messages, read with its run in one statement.
TASK_MESSAGES = Documents(table=TaskMessage._meta.db_table)

LIST_DEFAULT_PAGE_SIZE = 50
LIST_MAX_PAGE_SIZE = 100


def task_run_readable(*, subject: Subject, task_id: str) -> Run:
    """The run behind a task id, or TaskNotFoundError: unknown, malformed, foreign and purged ids
    all take this one path and get the same bytes (interop.md §A2A error details)."""
    try:
        return run_get_readable(subject=subject, run_id=task_id)
    except NotFound:
        raise TaskNotFoundError() from None


async def task_read(*, subject: Subject, task_id: str) -> RunSnapshot:
    """The caller's task (its run, open interrupt, artifacts, Messages), or TaskNotFoundError."""
    try:
        return await snapshot_read(tenant_pk=await asubject_tenant_pk(subject), run_id=task_id, documents=TASK_MESSAGES)
    except NotFound:
        raise TaskNotFoundError() from None


def task_message_find(*, subject: Subject, message_id: str) -> TaskMessage | None:
    """The first Message this principal sent with `message_id` (its de-duplication record)."""
    return (
        TaskMessage.objects.for_tenant(subject_tenant_pk(subject))
        .select_related("run", "run__workflow")
        .filter(principal=subject.subject_id, message_id=message_id)
        .first()
    )


def card_path_configured() -> str | None:
    """The facet's `agent_card_path`, read only (one primary-key read; a missing facet is not
    created here): the catch-all that serves a moved card asks on every unrouted path."""
    return Facet.objects.filter(pk="a2a").values_list("agent_card_path", flat=True).first()


def skill_route_pin_current() -> SkillRoutePin | None:
    """The host's "route only this skill" choice, if one is made (SkillRoutePin)."""
    return SkillRoutePin.objects.select_related("route").first()


def skill_routes_enabled() -> list[SkillRoute]:
    """The card's skills, the default first (SkillRoute.Meta.ordering); only the pinned one while
    a pin exists, whatever the table says of the others."""
    pin = skill_route_pin_current()
    if pin is not None:
        return [pin.route]
    return list(SkillRoute.objects.filter(enabled=True))


# ---------------------------------------------------------------------------------------------
# ListTasks


@dataclass(frozen=True)
class TaskPage:
    views: list[RunSnapshot]
    next_page_token: str  # "" on the last page (always present on the wire)
    page_size: int
    total_size: int


_WAITING = (RunStatus.WAITING_APPROVAL, RunStatus.WAITING_INPUT, RunStatus.WAITING_EXTERNAL)

# The inverse task-state projection (map `a2a.ops` ListTasks: status filter). A state the forward
# projection never produces (REJECTED) has no row: it lists nothing.
STATE_FILTERS: dict[int, RunFilters] = {
    TaskState.TASK_STATE_SUBMITTED: RunFilters(statuses=(RunStatus.PENDING,)),
    TaskState.TASK_STATE_WORKING: RunFilters(statuses=(RunStatus.RUNNING, RunStatus.CANCELLING)),
    TaskState.TASK_STATE_INPUT_REQUIRED: RunFilters(
        statuses=_WAITING, exclude_open_interrupt_kind=InterruptKind.CREDENTIAL
    ),
    TaskState.TASK_STATE_AUTH_REQUIRED: RunFilters(
        statuses=(RunStatus.WAITING_INPUT,), open_interrupt_kind=InterruptKind.CREDENTIAL
    ),
    TaskState.TASK_STATE_COMPLETED: RunFilters(statuses=(RunStatus.COMPLETED,)),
    TaskState.TASK_STATE_FAILED: RunFilters(statuses=(RunStatus.FAILED,)),
    TaskState.TASK_STATE_CANCELED: RunFilters(statuses=(RunStatus.CANCELLED,)),
    TaskState.TASK_STATE_UNSPECIFIED: RunFilters(),
}


async def task_page(
    *,
    subject: Subject,
    context_id: str | None,
    state: int | None,
    status_after: datetime | None,
    page_size: int | None,
    page_token: str | None,
    include_artifacts: bool,
) -> TaskPage:
    """One page of the caller's tasks (the listRuns read): newest status first, keyset-paginated;
    its cursor is the nextPageToken, its errors this binding's -32602."""
    size = LIST_DEFAULT_PAGE_SIZE if page_size is None else page_size
    if not 1 <= size <= LIST_MAX_PAGE_SIZE:
        raise invalid_params(f"pageSize must be 1-{LIST_MAX_PAGE_SIZE}.", field="pageSize")
    filters = STATE_FILTERS.get(state or TaskState.TASK_STATE_UNSPECIFIED)
    if filters is None:
        return TaskPage(views=[], next_page_token="", page_size=size, total_size=0)
    try:
        page = await page_read(
            tenant_pk=await asubject_tenant_pk(subject), tenant=subject.tenant, order=RunOrder.UPDATED,
            filters=replace(filters, context_id=context_id, updated_after=status_after),
            limit=size, cursor=page_token or None, count_total=True, artifacts=include_artifacts,
            documents=TASK_MESSAGES,
        )  # fmt: skip
    except ValidationFailed:
        # The only argument left unchecked here is the token: one this host did not mint for
        # this caller and order.
        raise invalid_params("The pageToken was not minted by this host.", field="pageToken") from None
    return TaskPage(
        views=page.snapshots, next_page_token=page.next_cursor or "", page_size=size, total_size=page.total_size or 0
    )


def task_first_message(*, tenant_pk: int, run_id: str) -> dict[str, Any] | None:
    """The A2A Message that started the run (ProtoJSON, as TaskMessage keeps it), or None for a
    run no A2A message started: what a relay forwards, and the label that came with it."""
    row = (
        TaskMessage.objects.for_tenant(tenant_pk)
        .filter(run__run_id=run_id)
        .order_by("created_at", "id")
        .values_list("document", flat=True)
        .first()
    )
    return row if isinstance(row, dict) else None
