"""Reads for the console, always inside the signed-in user's one tenant.

Everything is looked up through the tenant-scoped managers or the owning apps' selectors and
services with the console user's Subject, so another tenant's id is simply not there: the views
answer it with the same 404 as an unknown id (interop.md §Isolation).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from apps.agents.models import Workflow
from apps.agents.selectors import InventoryEntry, agent_inventory
from apps.audit.deprecation import VersionUsage, version_usage
from apps.console.models import TenantMembership
from apps.facets.policy import ScheduledFloor, scheduled_floors_of_tenant
from apps.facets.services import facet_ensure
from apps.push.models import Delivery, PushConfig, Webhook
from apps.push.selectors import (
    deliveries_needing_attention,
    push_configs_of_tenant,
    task_push_deliveries,
    webhook_dead_letters,
    webhook_deliveries,
    webhooks_of_tenant,
)
from apps.push.services import push_config_list, webhook_get
from apps.runs.approvers import approvers_of
from apps.runs.models import Interrupt, InterruptKind, Run, RunEvent, RunStatus
from apps.runs.selectors import run_get_readable, run_open_interrupt
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.subject import Subject

RECENT_RUNS = 25
RECENT_ROWS = 50
OVERVIEW_ROWS = 10
RUN_EVENTS_SHOWN = 500
JSON_SHOWN_CHARS = 20_000


def membership_of(user: Any) -> TenantMembership | None:
    """The user's membership, or None (anonymous, staff without one, or an unbound user)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    return TenantMembership.objects.select_related("tenant").filter(user=user).first()


def console_subject(membership: TenantMembership) -> Subject:
    """The console user as a Subject of their tenant, for the owning apps' tenant-scoped reads."""
    return Subject(
        issuer=f"{settings.OPENWOP_PUBLIC_URL}/console",
        subject_id=f"console-user-{membership.user_id}",
        tenant=membership.tenant.slug,
        kind="user",
        lane="session",
    )


def api_keys(*, tenant: Tenant) -> list[ApiKey]:
    return list(ApiKey.objects.for_tenant(tenant).order_by("-created_at")[:RECENT_ROWS])


def api_key_get(*, tenant: Tenant, prefix: str) -> ApiKey | None:
    return ApiKey.objects.for_tenant(tenant).filter(prefix=prefix).first()


@dataclass(frozen=True, slots=True)
class ConsoleAgent:
    entry: InventoryEntry
    public_card_url: str
    agent_card_url: str | None  # GetExtendedAgentCard over HTTP+JSON with the agent's `tenant: R`


def agents(*, subject: Subject) -> list[ConsoleAgent]:
    base = settings.OPENWOP_PUBLIC_URL
    public = base + facet_ensure(protocol="a2a").agent_card_path
    return [
        ConsoleAgent(
            entry=entry,
            public_card_url=public,
            agent_card_url=f"{base}/a2a/rest/{entry.a2a_tenant}/extendedAgentCard" if entry.a2a_tenant else None,
        )
        for entry in agent_inventory(subject=subject)
    ]


def push_configs(*, tenant: Tenant) -> list[PushConfig]:
    return push_configs_of_tenant(tenant=tenant, limit=RECENT_ROWS)


def webhooks(*, tenant: Tenant) -> list[Webhook]:
    return webhooks_of_tenant(tenant=tenant, limit=RECENT_ROWS)


@dataclass(frozen=True, slots=True)
class TaskPush:
    run: Run
    configs: list[PushConfig]
    deliveries: list[Delivery]


def task_push(*, subject: Subject, task_id: str) -> TaskPush:
    """A task's push configs and their deliveries with attempts; NotFound for any unreadable task."""
    configs = push_config_list(subject=subject, task_id=task_id)
    run = run_get_readable(subject=subject, run_id=task_id)
    return TaskPush(run=run, configs=configs, deliveries=task_push_deliveries(run=run, limit=RECENT_ROWS))


@dataclass(frozen=True, slots=True)
class WebhookDetail:
    webhook: Webhook
    deliveries: list[Delivery]
    dead_letters: list[dict[str, Any]]


def webhook_detail(*, subject: Subject, webhook_id: str) -> WebhookDetail:
    """A webhook's deliveries with attempts and its first page of dead letters; NotFound for any
    unreadable webhook."""
    webhook = webhook_get(subject=subject, webhook_id=webhook_id)
    return WebhookDetail(
        webhook=webhook,
        deliveries=webhook_deliveries(webhook=webhook, limit=RECENT_ROWS),
        dead_letters=webhook_dead_letters(subject=subject, webhook_id=webhook_id, limit=RECENT_ROWS).records,
    )


@dataclass(frozen=True)
class FloorNotice:
    """A scheduled floor and what the tenant's callers used below it over the last 30 days."""

    floor: ScheduledFloor
    usage: list[VersionUsage]


FLOOR_NOTICE_DAYS = 30


def floor_notices(*, tenant: Tenant) -> list[FloorNotice]:
    """The console's notice: each floor scheduled to bind the tenant's exchanges, with
    the versions below it its callers requested (apps.audit.deprecation rollups: which, since when,
    from how many peers)."""
    notices = []
    for scheduled in scheduled_floors_of_tenant(tenant=tenant):
        try:
            usage = version_usage(
                protocol=scheduled.protocol,
                tenant_slug=tenant.slug,
                versions_below=scheduled.floor,
                days=FLOOR_NOTICE_DAYS,
            )
        except ValueError:  # a floor outside the grammar: nothing to measure it against
            usage = []
        notices.append(FloorNotice(floor=scheduled, usage=usage))
    return notices


# ---------------------------------------------------------------------------------------------
# The overview, the runs list and the run page


def pretty_json(value: Any) -> str:
    """A caller's JSON as indented text for a <pre> (the template escapes it), cut when huge."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= JSON_SHOWN_CHARS else text[:JSON_SHOWN_CHARS] + "\n... (cut: the API has it whole)"


def _run_rows(tenant: Tenant) -> QuerySet[Run]:
    """The tenant's runs with their workflow, without the columns no listing shows."""
    return Run.objects.for_tenant(tenant).select_related("workflow").defer("definition", "variables", "inputs")


@dataclass(frozen=True)
class Overview:
    recent: list[Run]
    failed: list[Run]
    attention: list[Delivery]
    floor_notices: list[FloorNotice]


def overview(*, tenant: Tenant) -> Overview:
    """The console's landing: the newest runs, the newest failures (newest status change first,
    on the tenant's by-status index), deliveries that are dead or failing, and scheduled floors."""
    return Overview(
        recent=list(_run_rows(tenant).order_by("-created_at", "-id")[:OVERVIEW_ROWS]),
        failed=list(_run_rows(tenant).filter(status=RunStatus.FAILED).order_by("-updated_at", "-id")[:OVERVIEW_ROWS]),
        attention=deliveries_needing_attention(tenant=tenant, limit=OVERVIEW_ROWS),
        floor_notices=floor_notices(tenant=tenant),
    )


def workflow_ids(*, tenant: Tenant) -> list[str]:
    """The tenant's workflow ids, for the runs filter."""
    return list(Workflow.objects.for_tenant(tenant).order_by("workflow_id").values_list("workflow_id", flat=True))


@dataclass(frozen=True)
class RunQuery:
    """The runs list's filters; every one narrows inside the tenant, none widens."""

    status: str = ""
    workflow_id: str = ""
    created_from: datetime | None = None
    created_until: datetime | None = None
    run_id_prefix: str = ""  # a run id or its start; the tenant's `<slug>/` is implied


def runs_filtered(*, tenant: Tenant, query: RunQuery, limit: int = RECENT_RUNS) -> list[Run]:
    """The tenant's newest runs (by creation, its run_list_newest_first index) that the query admits."""
    rows = _run_rows(tenant)
    if query.status:
        rows = rows.filter(status=query.status)
    if query.workflow_id:
        rows = rows.filter(workflow__workflow_id=query.workflow_id)
    if query.created_from is not None:
        rows = rows.filter(created_at__gte=query.created_from)
    if query.created_until is not None:
        rows = rows.filter(created_at__lt=query.created_until)
    if query.run_id_prefix:
        prefix = query.run_id_prefix
        if "/" not in prefix:  # the opaque part alone
            prefix = f"{tenant.slug}/{prefix}"
        rows = rows.filter(run_id__startswith=prefix)
    return list(rows.order_by("-created_at", "-id")[:limit])


@dataclass(frozen=True)
class TimelineEntry:
    event: RunEvent
    payload: str  # pretty JSON ("" for an empty payload)


@dataclass(frozen=True)
class OpenInterruptView:
    interrupt: Interrupt
    title: str
    data: str  # pretty JSON of the payload's data
    answerable: bool  # an approval this console user may answer with approve / reject
    why_not: str


@dataclass(frozen=True)
class RunDetail:
    run: Run
    inputs: str
    outputs: str | None
    error: str | None
    timeline: list[TimelineEntry]
    timeline_cut: bool
    interrupt: OpenInterruptView | None
    configs: list[PushConfig]
    deliveries: list[Delivery]


def _interrupt_view(interrupt: Interrupt, subject: Subject) -> OpenInterruptView:
    data = interrupt.payload.get("data") if isinstance(interrupt.payload, dict) else None
    data = data if isinstance(data, dict) else {}
    title = data.get("title") if isinstance(data.get("title"), str) else ""
    listed = approvers_of(interrupt.payload)
    why_not = ""
    if interrupt.kind != InterruptKind.APPROVAL:
        why_not = (
            f"A {interrupt.kind} interrupt is answered through the API (POST /runs/{{runId}}/interrupts/{{nodeId}})."
        )
    elif listed and subject.subject_id not in listed:
        why_not = "Only the interrupt's listed approvers may resolve it."
    return OpenInterruptView(
        interrupt=interrupt,
        title=title or f"{interrupt.kind} at {interrupt.node_id}",
        data=pretty_json(data),
        answerable=not why_not,
        why_not=why_not,
    )


def run_detail(*, subject: Subject, run_id: str) -> RunDetail:
    """One run of the tenant with its log (the first RUN_EVENTS_SHOWN events), its open interrupt,
    its push configs and their deliveries; NotFound for any run the subject cannot read."""
    run = run_get_readable(subject=subject, run_id=run_id)
    log = RunEvent.objects.for_tenant(run.tenant_id).filter(run=run).order_by("sequence")
    events = list(log[: RUN_EVENTS_SHOWN + 1])
    shown = events[:RUN_EVENTS_SHOWN]
    interrupt = run_open_interrupt(run=run)
    return RunDetail(
        run=run,
        inputs=pretty_json(run.inputs),
        outputs=None if run.outputs is None else pretty_json(run.outputs),
        error=None if run.error is None else pretty_json(run.error),
        timeline=[TimelineEntry(event=e, payload=pretty_json(e.payload) if e.payload else "") for e in shown],
        timeline_cut=len(events) > RUN_EVENTS_SHOWN,
        interrupt=None if interrupt is None else _interrupt_view(interrupt, subject),
        configs=push_config_list(subject=subject, task_id=run.run_id),
        deliveries=task_push_deliveries(run=run, limit=RECENT_ROWS),
    )
