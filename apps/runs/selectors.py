"""Reads for runs. Every read of a run goes through `run_get_readable` (STYLE.md habit 5)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.core import signing
from django.db.models import Q
from django.utils.dateparse import parse_datetime

from apps.core.errors import NotFound, ValidationFailed
from apps.runs.models import WAITING_STATUSES, Interrupt, Run, RunEvent, RunStatus
from apps.tenants.models import Tenant
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
    run = Run.objects.for_tenant(_tenant_pk(subject)).select_related("workflow").filter(run_id=run_id).first()
    if run is None:
        raise NotFound("No such run.")
    return run


def interrupt_get_readable(*, subject: Subject, interrupt_id: str) -> Interrupt:
    """An interrupt by its tenant-bound id (the MCP/A2A input key), under the same rule as runs."""
    interrupt = (
        Interrupt.objects.for_tenant(_tenant_pk(subject))
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


def run_events_after(*, run: Run, after: int) -> list[RunEvent]:
    """The run's events with sequence > `after`, in order."""
    return list(RunEvent.objects.for_tenant(run.tenant_id).filter(run=run, sequence__gt=after).order_by("sequence"))


@dataclass(frozen=True)
class RunPage:
    runs: list[tuple[Run, Interrupt | None]]
    next_cursor: str | None


def run_list(
    *,
    subject: Subject,
    workflow_id: str | None = None,
    status: str | None = None,
    limit: int = RUN_LIST_DEFAULT_PAGE_SIZE,
    cursor: str | None = None,
) -> RunPage:
    """One page of the tenant's runs, newest first (runs.md §List), keyset-paginated."""
    if not 1 <= limit <= RUN_LIST_MAX_PAGE_SIZE:
        raise ValidationFailed(
            f"limit is 1-{RUN_LIST_MAX_PAGE_SIZE}.", details={"field": "limit", "maxPageSize": RUN_LIST_MAX_PAGE_SIZE}
        )
    if status is not None and status not in RunStatus.values:
        raise ValidationFailed("Unknown run status.", details={"field": "status", "allowed": RunStatus.values})
    tenant_pk = _tenant_pk(subject)
    runs = Run.objects.for_tenant(tenant_pk).select_related("workflow").order_by("-created_at", "-id")
    if workflow_id is not None:
        runs = runs.filter(workflow__workflow_id=workflow_id)
    if status is not None:
        runs = runs.filter(status=status)
    if cursor is not None:
        created_at, pk = _cursor_position(cursor, tenant=subject.tenant)
        runs = runs.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk))
    page = list(runs[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    open_interrupts = {
        i.run_id: i
        for i in Interrupt.objects.for_tenant(tenant_pk).filter(
            run__in=[r for r in page if r.status in WAITING_STATUSES], resolved_at__isnull=True
        )
    }
    next_cursor = _cursor_mint(page[-1], tenant=subject.tenant) if more else None
    return RunPage(runs=[(r, open_interrupts.get(r.pk)) for r in page], next_cursor=next_cursor)


def _cursor_mint(run: Run, *, tenant: str) -> str:
    return signing.dumps({"t": tenant, "c": run.created_at.isoformat(), "i": run.pk}, salt=_CURSOR_SALT, compress=True)


def _cursor_position(cursor: str, *, tenant: str) -> tuple[datetime, int]:
    """A cursor this host minted for this tenant, or 400 (runs.md: never trust a foreign cursor)."""
    try:
        data = signing.loads(cursor, salt=_CURSOR_SALT)
        created_at = parse_datetime(data["c"])
        if data["t"] != tenant or created_at is None or not isinstance(data["i"], int):
            raise ValueError("cursor of another tenant")
    except (signing.BadSignature, KeyError, TypeError, ValueError) as exc:
        raise ValidationFailed("The cursor was not minted by this host.", details={"field": "cursor"}) from exc
    return created_at, data["i"]


def _tenant_pk(subject: Subject) -> int:
    return Tenant.objects.values_list("pk", flat=True).get(slug=subject.tenant)
