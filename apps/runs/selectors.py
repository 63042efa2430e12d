"""Reads for runs. Every read of a run goes through `run_get_readable` (STYLE.md habit 5)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from django.core import signing
from django.db.models import Exists, OuterRef, Q, Sum
from django.utils.dateparse import parse_datetime

from apps.core.errors import NotFound, ValidationFailed
from apps.runs.models import WAITING_STATUSES, Interrupt, Run, RunEvent, RunStatus, RunTally, run_tally_column
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject

RUN_LIST_MAX_PAGE_SIZE = 100
RUN_LIST_DEFAULT_PAGE_SIZE = 50
_CURSOR_SALT = "openwop.runs.list.cursor"


def run_get_readable(*, subject: Subject, run_id: str) -> Run:
    """The run, if the subject may read it; otherwise one NotFound, whatever the reason.

    A run is readable by every Subject of its tenant. Doors map the NotFound once: REST answers
    403 id_tenant_mismatch for a foreign tenant segment before calling this; A2A and MCP map a
    foreign and an unknown id to the same bytes.
    """
    run = Run.objects.for_tenant(subject_tenant_pk(subject)).select_related("workflow").filter(run_id=run_id).first()
    if run is None:
        raise NotFound("No such run.")
    return run


def interrupt_get_readable(*, subject: Subject, interrupt_id: str) -> Interrupt:
    """An interrupt by its tenant-bound id (the MCP/A2A input key), under the same rule as runs."""
    interrupt = (
        Interrupt.objects.for_tenant(subject_tenant_pk(subject))
        .select_related("run")
        .filter(interrupt_id=interrupt_id)
        .first()
    )
    if interrupt is None:
        raise NotFound("No such interrupt.")
    return interrupt


def run_open_interrupt(*, run: Run) -> Interrupt | None:
    """The unresolved interrupt a waiting run is suspended on."""
    if run.status not in WAITING_STATUSES:
        return None
    return (
        Interrupt.objects.for_tenant(run.tenant_id)
        .filter(run=run, resolved_at__isnull=True)
        .order_by("-created_at")
        .first()
    )


def run_open_interrupts(*, run: Run) -> list[Interrupt]:
    """Every unresolved interrupt a waiting run is suspended on, oldest first (a parallel node
    opens several at once)."""
    if run.status not in WAITING_STATUSES:
        return []
    unresolved = Interrupt.objects.for_tenant(run.tenant_id).filter(run=run, resolved_at__isnull=True)
    return list(unresolved.order_by("created_at", "pk"))


def run_events_after(*, run: Run, after: int) -> list[RunEvent]:
    """The run's events with sequence > `after`, in order."""
    return list(RunEvent.objects.for_tenant(run.tenant_id).filter(run=run, sequence__gt=after).order_by("sequence"))


def run_event_payloads(*, run: Run, type: str) -> list[dict]:
    """The payloads of the run's events of one type, in order, up to the row's `last_sequence`
    (what the log held when the row was read). One narrow read: a projection that needs only one
    type (A2A artifacts) does not fetch and build every event of the run."""
    return list(
        RunEvent.objects.for_tenant(run.tenant_id)
        .filter(run=run, type=type, sequence__lte=run.last_sequence)
        .order_by("sequence")
        .values_list("payload", flat=True)
    )


def run_count(*, tenant_pk: int, statuses: Collection[str] | None = None) -> int:
    """How many runs the tenant has (in `statuses`, when given), exactly, at the cost of reading
    its few tally rows instead of counting its runs (RunTally: kept by triggers)."""
    columns = ["runs"] if statuses is None else [run_tally_column(status) for status in sorted(set(statuses))]
    if not columns:
        return 0
    totals = RunTally.objects.for_tenant(tenant_pk).aggregate(**{column: Sum(column) for column in columns})
    return sum(total or 0 for total in totals.values())


@dataclass(frozen=True)
class RunPage:
    runs: list[tuple[Run, Interrupt | None]]
    next_cursor: str | None
    total_size: int | None = None  # with `count_total`: every run the filters admit, all pages


class RunOrder(StrEnum):
    """`created`: newest run first (runs.md §List). `updated`: newest status change first, the
    order A2A ListTasks requires (the row's updated_at is the status timestamp a Task shows)."""

    CREATED = "created"
    UPDATED = "updated"


_ORDER_FIELD = {RunOrder.CREATED: "created_at", RunOrder.UPDATED: "updated_at"}


def run_list(
    *,
    subject: Subject,
    workflow_id: str | None = None,
    status: str | None = None,
    statuses: Collection[str] | None = None,
    context_id: str | None = None,
    updated_after: datetime | None = None,
    open_interrupt_kind: str | None = None,
    exclude_open_interrupt_kind: str | None = None,
    order: RunOrder = RunOrder.CREATED,
    limit: int = RUN_LIST_DEFAULT_PAGE_SIZE,
    cursor: str | None = None,
    count_total: bool = False,
) -> RunPage:
    """One page of the runs `subject` may list, keyset-paginated: the one listRuns read (REST
    `GET /runs`, A2A ListTasks), whatever door asks.

    Visibility is every run of the subject's tenant and nothing else; no filter widens it.
    `statuses` admits any of several statuses (`status` one); `context_id` keeps the runs of one
    A2A context, where a run started without one is its own context (its runId stands in, as the
    A2A projection shows it); `updated_after` keeps runs whose status changed at or after it;
    `open_interrupt_kind` / `exclude_open_interrupt_kind` keep (drop) runs suspended on an open
    interrupt of that kind. A cursor is bound to the tenant and the order it was minted for.

    `count_total`: `total_size` is every run the filters admit. With no filter, or `status` /
    `statuses` alone, it is read from the tenant's tally (RunTally, per status) and never counts
    rows; the tally cannot answer `workflow_id`, `context_id`, `updated_after` or the open-interrupt
    filters, so with any of those the matching rows are counted (through the filter's index).
    """
    if not 1 <= limit <= RUN_LIST_MAX_PAGE_SIZE:
        raise ValidationFailed(
            f"limit is 1-{RUN_LIST_MAX_PAGE_SIZE}.", details={"field": "limit", "maxPageSize": RUN_LIST_MAX_PAGE_SIZE}
        )
    wanted = [status] if status is not None else list(statuses) if statuses is not None else None
    if wanted is not None and any(s not in RunStatus.values for s in wanted):
        raise ValidationFailed("Unknown run status.", details={"field": "status", "allowed": RunStatus.values})
    tenant_pk = subject_tenant_pk(subject)
    field = _ORDER_FIELD[order]
    runs = Run.objects.for_tenant(tenant_pk).select_related("workflow")
    if workflow_id is not None:
        runs = runs.filter(workflow__workflow_id=workflow_id)
    if wanted is not None:
        runs = runs.filter(status__in=wanted)
    if context_id is not None:
        runs = runs.filter(Q(context_id=context_id) | Q(context_id="", run_id=context_id))
    if updated_after is not None:
        runs = runs.filter(updated_at__gte=updated_after)
    for kind, keep in ((open_interrupt_kind, True), (exclude_open_interrupt_kind, False)):
        if kind is not None:
            open_of_kind = Exists(
                Interrupt.unscoped_all_tenants.filter(run=OuterRef("pk"), resolved_at__isnull=True, kind=kind)
            )
            runs = runs.filter(open_of_kind if keep else ~open_of_kind)
    total = None
    if count_total:
        by_status_only = workflow_id is None and context_id is None and updated_after is None
        by_status_only = by_status_only and open_interrupt_kind is None and exclude_open_interrupt_kind is None
        # Unfiltered or filtered by status only: the tenant's tally, flat however many runs it has.
        # Any other filter: an exact count over the filter's index (run_list_by_status,
        # run_list_by_context, run_list_status_newest), which reads the matching runs only.
        total = run_count(tenant_pk=tenant_pk, statuses=wanted) if by_status_only else runs.count()
    if cursor is not None:
        position, pk = run_cursor_position(cursor, tenant=subject.tenant, order=order)
        runs = runs.filter(Q(**{f"{field}__lt": position}) | Q(**{field: position, "id__lt": pk}))
    page = list(runs.order_by(f"-{field}", "-id")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    open_interrupts = {
        i.run_id: i
        for i in Interrupt.objects.for_tenant(tenant_pk)
        .filter(run__in=[r for r in page if r.status in WAITING_STATUSES], resolved_at__isnull=True)
        .order_by("created_at")  # the newest open one wins, as in run_open_interrupt
    }
    next_cursor = run_cursor_mint(page[-1], tenant=subject.tenant, order=order) if more else None
    return RunPage(runs=[(r, open_interrupts.get(r.pk)) for r in page], next_cursor=next_cursor, total_size=total)


def run_cursor_mint(run: Run, *, tenant: str, order: RunOrder) -> str:
    position = getattr(run, _ORDER_FIELD[order]).isoformat()
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
