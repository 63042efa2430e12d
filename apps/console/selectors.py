"""Reads for the console, always inside the signed-in user's one tenant.

Everything is looked up through the tenant-scoped managers or the owning apps' selectors and
services with the console user's Subject, so another tenant's id is simply not there: the views
answer it with the same 404 as an unknown id (interop.md §Isolation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from apps.agents.selectors import InventoryEntry, agent_inventory
from apps.audit.deprecation import VersionUsage, version_usage
from apps.console.models import TenantMembership
from apps.facets.policy import ScheduledFloor, scheduled_floors_of_tenant
from apps.facets.services import facet_ensure
from apps.push.models import Delivery, PushConfig, Webhook
from apps.push.selectors import (
    push_configs_of_tenant,
    task_push_deliveries,
    webhook_dead_letters,
    webhook_deliveries,
    webhooks_of_tenant,
)
from apps.push.services import push_config_list, webhook_get
from apps.runs.models import Run
from apps.runs.reads import RunRow, page_read_sync
from apps.runs.selectors import run_get_readable
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject

RECENT_RUNS = 25
RECENT_ROWS = 50


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


def recent_runs(*, subject: Subject) -> list[RunRow]:
    page = page_read_sync(tenant_pk=subject_tenant_pk(subject), tenant=subject.tenant, limit=RECENT_RUNS)
    return [snapshot.run for snapshot in page.snapshots]


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
                protocol=scheduled.protocol, tenant_slug=tenant.slug, versions_below=scheduled.floor,
                days=FLOOR_NOTICE_DAYS,
            )
        except ValueError:  # a floor outside the grammar: nothing to measure it against
            usage = []
        notices.append(FloorNotice(floor=scheduled, usage=usage))
    return notices
