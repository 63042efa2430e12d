"""Reads for the A2A door. Every task read starts at `run_get_readable` (interop.md §Isolation).

`task_page` is the one read that cannot go through `runs.selectors.run_list` as it stands: ListTasks
filters on contextId, on a task state (several run statuses, and the open interrupt's kind) and on
the status timestamp, and answers a total. Its visibility rule is run_list's, stated once here:
every run of the caller's tenant, nothing else (`tenant` / `contextId` never widen it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from a2a.types import TaskState
from a2a.utils.errors import TaskNotFoundError
from django.core import signing
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils.dateparse import parse_datetime

from apps.a2a.errors import invalid_params
from apps.a2a.models import SkillRoute, TaskMessage
from apps.a2a.wire import InterruptView, TaskView
from apps.core.errors import NotFound
from apps.runs.models import Interrupt, InterruptKind, Run, RunStatus
from apps.runs.selectors import run_events_after, run_get_readable, run_open_interrupt
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject

LIST_DEFAULT_PAGE_SIZE = 50
LIST_MAX_PAGE_SIZE = 100
_PAGE_CURSOR_SALT = "openwop.a2a.list-tasks.page-token"


def task_run_readable(*, subject: Subject, task_id: str) -> Run:
    """The run behind a task id, or TaskNotFoundError: unknown, malformed, foreign and purged ids
    all take this one path and get the same bytes (interop.md §A2A error details)."""
    try:
        return run_get_readable(subject=subject, run_id=task_id)
    except NotFound:
        raise TaskNotFoundError() from None


def task_view_of(run: Run) -> TaskView:
    interrupt = run_open_interrupt(run=run)
    return TaskView(
        run=run,
        open_interrupt=InterruptView.of(interrupt) if interrupt is not None else None,
        # Only what the log held when the row was read: a stream resumes after run.last_sequence.
        artifacts=[
            e.payload
            for e in run_events_after(run=run, after=0)
            if e.type == "artifact.created" and e.sequence <= run.last_sequence
        ],
        messages=task_messages(run=run),
    )


def task_view(*, subject: Subject, task_id: str) -> TaskView:
    return task_view_of(task_run_readable(subject=subject, task_id=task_id))


def task_messages(*, run: Run) -> list[dict]:
    return list(
        TaskMessage.objects.for_tenant(run.tenant_id)
        .filter(run=run)
        .order_by("created_at", "id")
        .values_list("document", flat=True)
    )


def task_message_find(*, subject: Subject, message_id: str) -> TaskMessage | None:
    """The first Message this principal sent with `message_id` (its de-duplication record)."""
    return (
        TaskMessage.objects.for_tenant(_tenant_pk(subject))
        .select_related("run", "run__workflow")
        .filter(principal=subject.subject_id, message_id=message_id)
        .first()
    )


def skill_routes_enabled() -> list[SkillRoute]:
    """The card's skills, the default first (SkillRoute.Meta.ordering)."""
    return list(SkillRoute.objects.filter(enabled=True))


# ---------------------------------------------------------------------------------------------
# ListTasks


@dataclass(frozen=True)
class TaskPage:
    views: list[TaskView]
    next_page_token: str  # "" on the last page (always present on the wire)
    page_size: int
    total_size: int


def _state_filters(state: int) -> list[Any]:
    """The inverse task-state projection (map `a2a.ops` ListTasks: status filter)."""
    credential_open = Exists(
        Interrupt.unscoped_all_tenants.filter(
            run=OuterRef("pk"), resolved_at__isnull=True, kind=InterruptKind.CREDENTIAL
        )
    )
    waiting = [RunStatus.WAITING_APPROVAL, RunStatus.WAITING_INPUT, RunStatus.WAITING_EXTERNAL]
    if state == TaskState.TASK_STATE_SUBMITTED:
        return [Q(status=RunStatus.PENDING)]
    if state == TaskState.TASK_STATE_WORKING:
        return [Q(status__in=[RunStatus.RUNNING, RunStatus.CANCELLING])]
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        return [Q(status__in=waiting), ~credential_open]
    if state == TaskState.TASK_STATE_AUTH_REQUIRED:
        return [Q(status=RunStatus.WAITING_INPUT), credential_open]
    if state == TaskState.TASK_STATE_COMPLETED:
        return [Q(status=RunStatus.COMPLETED)]
    if state == TaskState.TASK_STATE_FAILED:
        return [Q(status=RunStatus.FAILED)]
    if state == TaskState.TASK_STATE_CANCELED:
        return [Q(status=RunStatus.CANCELLED)]
    return [Q(pk__in=[])]  # REJECTED: never produced by the forward projection


def task_page(
    *,
    subject: Subject,
    context_id: str | None,
    state: int | None,
    status_after: datetime | None,
    page_size: int | None,
    page_token: str | None,
    include_artifacts: bool,
) -> TaskPage:
    """One page of the caller's tasks, newest status first (the row's `updated_at` is the status
    timestamp every Task shows), keyset-paginated on (updated_at, pk)."""
    size = LIST_DEFAULT_PAGE_SIZE if page_size is None else page_size
    if not 1 <= size <= LIST_MAX_PAGE_SIZE:
        raise invalid_params(f"pageSize must be 1-{LIST_MAX_PAGE_SIZE}.", field="pageSize")
    tenant_pk = _tenant_pk(subject)
    runs: QuerySet[Run] = Run.objects.for_tenant(tenant_pk).select_related("workflow")
    if context_id:
        runs = runs.filter(Q(context_id=context_id) | Q(context_id="", run_id=context_id))
    if state is not None and state != TaskState.TASK_STATE_UNSPECIFIED:
        runs = runs.filter(*_state_filters(state))
    if status_after is not None:
        runs = runs.filter(updated_at__gte=status_after)
    total = runs.count()
    if page_token:
        updated_at, pk = _token_position(page_token, tenant=subject.tenant)
        runs = runs.filter(Q(updated_at__lt=updated_at) | Q(updated_at=updated_at, pk__lt=pk))
    page = list(runs.order_by("-updated_at", "-pk")[: size + 1])
    more = len(page) > size
    page = page[:size]
    views = [
        task_view_of(run)
        if include_artifacts
        else TaskView(
            run=run,
            open_interrupt=_open_interrupt_view(run),
            messages=task_messages(run=run),
        )
        for run in page
    ]
    token = _token_mint(page[-1], tenant=subject.tenant) if more else ""
    return TaskPage(views=views, next_page_token=token, page_size=size, total_size=total)


def _open_interrupt_view(run: Run) -> InterruptView | None:
    interrupt = run_open_interrupt(run=run)
    return InterruptView.of(interrupt) if interrupt is not None else None


def _token_mint(run: Run, *, tenant: str) -> str:
    return signing.dumps(
        {"t": tenant, "u": run.updated_at.isoformat(), "i": run.pk}, salt=_PAGE_CURSOR_SALT, compress=True
    )


def _token_position(token: str, *, tenant: str) -> tuple[datetime, int]:
    """A token this host minted for this tenant, or -32602 (never trust a foreign token)."""
    try:
        data = signing.loads(token, salt=_PAGE_CURSOR_SALT)
        updated_at = parse_datetime(data["u"])
        if data["t"] != tenant or updated_at is None or not isinstance(data["i"], int):
            raise ValueError("token of another tenant")
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise invalid_params("The pageToken was not minted by this host.", field="pageToken") from None
    return updated_at, data["i"]


def _tenant_pk(subject: Subject) -> int:
    return Tenant.objects.values_list("pk", flat=True).get(slug=subject.tenant)
