"""Abuse ceilings on push registration: configs per task, and the tenant's undelivered backlog.

Checked when a config or webhook is registered, never when an event creates deliveries: a
delivery owed for a registered target is never dropped (at-least-once, interop.md §A2A push
delivery). A tenant whose receivers cannot keep up stops adding targets until its backlog drains.
Settings: OPENWOP_MAX_PUSH_CONFIGS_PER_TASK, OPENWOP_MAX_PENDING_DELIVERIES_PER_TENANT (0 = off).
"""

from __future__ import annotations

from django.conf import settings

from apps.core.errors import RateLimited, ValidationFailed
from apps.push.models import Delivery, DeliveryStatus, PushConfig
from apps.runs.models import Run
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject

# A backlog drains in attempts, not instantly: a refused registration may retry after this long.
BACKLOG_RETRY_AFTER_SECONDS = 30


class PushConfigLimitReached(ValidationFailed):
    default_message = "This task already has the maximum number of push notification configs."


def push_registration_check(*, tenant_id: int, run: Run | None = None) -> None:
    """Raise PushConfigLimitReached (400) when `run` holds its ceiling of configs, RateLimited
    (429 + Retry-After) when the tenant's pending deliveries are at theirs."""
    per_task = int(getattr(settings, "OPENWOP_MAX_PUSH_CONFIGS_PER_TASK", 0))
    configs = PushConfig.objects.for_tenant(tenant_id).filter(run=run)  # lazy: read only with a run
    if run is not None and per_task > 0 and configs.count() >= per_task:
        raise PushConfigLimitReached(details={"limit": per_task})
    backlog = int(getattr(settings, "OPENWOP_MAX_PENDING_DELIVERIES_PER_TENANT", 0))
    if backlog > 0:
        pending = Delivery.objects.for_tenant(tenant_id).filter(status=DeliveryStatus.PENDING)
        if pending[backlog - 1 : backlog].exists():
            raise RateLimited(
                "Too many push deliveries are pending for this tenant; retry once they drain.",
                retry_after=BACKLOG_RETRY_AFTER_SECONDS,
                details={"limit": backlog},
            )


def push_backlog_check(*, subject: Subject) -> None:
    """The tenant-backlog half of `push_registration_check`, for a door that registers a push
    config with a run it has yet to create (A2A's inline config): refused before the run exists."""
    push_registration_check(tenant_id=subject_tenant_pk(subject))
