"""Reads of runs as model rows, for the services that change them (a row to lock, resolve, attach
to) and every read of a run starts at `run_get_readable` (STYLE.md habit 5). The doors' reads
(snapshots, pages, events) are apps/runs/reads.py."""

from __future__ import annotations

from apps.core.errors import NotFound
from apps.runs.models import WAITING_STATUSES, Interrupt, Run
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject


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
