"""Reads for the A2A door. Every task read starts at `run_get_readable` (interop.md §Isolation).

`task_page` (ListTasks) is `runs.selectors.run_list`, the listRuns read, with the A2A filters
translated: contextId, the inverse task-state projection and the status timestamp; so ListTasks
returns exactly what listRuns returns to the same Subject (interop.md §Isolation).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from a2a.types import TaskState
from a2a.utils.errors import TaskNotFoundError

from apps.a2a.errors import invalid_params
from apps.a2a.models import SkillRoute, TaskMessage
from apps.a2a.wire import InterruptView, TaskView
from apps.core.errors import NotFound, ValidationFailed
from apps.facets.models import Facet
from apps.runs.models import InterruptKind, Run, RunEvent, RunStatus
from apps.runs.selectors import RunOrder, run_event_payloads, run_get_readable, run_list, run_open_interrupt
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject

LIST_DEFAULT_PAGE_SIZE = 50
LIST_MAX_PAGE_SIZE = 100


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
        artifacts=run_event_payloads(run=run, type="artifact.created"),
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


def _messages_by_run(runs: list[Run]) -> dict[int, list[dict]]:
    """`task_messages` of every run of a page in one read (a page is one tenant's runs)."""
    by_run: dict[int, list[dict]] = defaultdict(list)
    if runs:
        rows = (
            TaskMessage.objects.for_tenant(runs[0].tenant_id)
            .filter(run__in=[run.pk for run in runs])
            .order_by("created_at", "id")
            .values_list("run_id", "document")
        )
        for run_pk, document in rows:
            by_run[run_pk].append(document)
    return by_run


def _artifacts_by_run(runs: list[Run]) -> dict[int, list[dict]]:
    """`run_event_payloads(type="artifact.created")` of every run of a page in one read, each run's
    cut at the `last_sequence` its row was read with, as GetTask cuts it."""
    by_run: dict[int, list[dict]] = defaultdict(list)
    if runs:
        last = {run.pk: run.last_sequence for run in runs}
        rows = (
            RunEvent.objects.for_tenant(runs[0].tenant_id)
            .filter(run__in=list(last), type="artifact.created")
            .order_by("run_id", "sequence")
            .values_list("run_id", "sequence", "payload")
        )
        for run_pk, sequence, payload in rows:
            if sequence <= last[run_pk]:
                by_run[run_pk].append(payload)
    return by_run


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


_WAITING = (RunStatus.WAITING_APPROVAL, RunStatus.WAITING_INPUT, RunStatus.WAITING_EXTERNAL)


def _state_filters(state: int) -> dict[str, Any] | None:
    """The inverse task-state projection (map `a2a.ops` ListTasks: status filter) as `run_list`
    arguments; None for a state the forward projection never produces (REJECTED)."""
    by_state: dict[int, dict[str, Any]] = {
        TaskState.TASK_STATE_SUBMITTED: {"statuses": [RunStatus.PENDING]},
        TaskState.TASK_STATE_WORKING: {"statuses": [RunStatus.RUNNING, RunStatus.CANCELLING]},
        TaskState.TASK_STATE_INPUT_REQUIRED: {
            "statuses": _WAITING,
            "exclude_open_interrupt_kind": InterruptKind.CREDENTIAL,
        },
        TaskState.TASK_STATE_AUTH_REQUIRED: {
            "statuses": [RunStatus.WAITING_INPUT],
            "open_interrupt_kind": InterruptKind.CREDENTIAL,
        },
        TaskState.TASK_STATE_COMPLETED: {"statuses": [RunStatus.COMPLETED]},
        TaskState.TASK_STATE_FAILED: {"statuses": [RunStatus.FAILED]},
        TaskState.TASK_STATE_CANCELED: {"statuses": [RunStatus.CANCELLED]},
    }
    return by_state.get(state)


def task_page_size(page_size: int | None) -> int:
    size = LIST_DEFAULT_PAGE_SIZE if page_size is None else page_size
    if not 1 <= size <= LIST_MAX_PAGE_SIZE:
        raise invalid_params(f"pageSize must be 1-{LIST_MAX_PAGE_SIZE}.", field="pageSize")
    return size


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
    """One page of the caller's tasks through `run_list` (the listRuns read): newest status first,
    keyset-paginated; its cursor is the nextPageToken, its errors this binding's -32602."""
    size = task_page_size(page_size)
    filters: dict[str, Any] = {}
    if state is not None and state != TaskState.TASK_STATE_UNSPECIFIED:
        filters = _state_filters(state) or {}
        if not filters:
            return TaskPage(views=[], next_page_token="", page_size=size, total_size=0)
    try:
        page = run_list(
            subject=subject,
            context_id=context_id or None,
            updated_after=status_after,
            order=RunOrder.UPDATED,
            limit=size,
            cursor=page_token or None,
            count_total=True,
            **filters,
        )
    except ValidationFailed:
        # The only argument left unchecked here is the token: one this host did not mint for
        # this caller and order.
        raise invalid_params("The pageToken was not minted by this host.", field="pageToken") from None
    runs = [run for run, _ in page.runs]
    messages = _messages_by_run(runs)
    artifacts = _artifacts_by_run(runs) if include_artifacts else {}
    views = [
        TaskView(
            run=run,
            open_interrupt=InterruptView.of(interrupt) if interrupt is not None else None,
            artifacts=artifacts.get(run.pk, []),
            messages=messages.get(run.pk, []),
        )
        for run, interrupt in page.runs
    ]
    return TaskPage(
        views=views, next_page_token=page.next_cursor or "", page_size=size, total_size=page.total_size or 0
    )
