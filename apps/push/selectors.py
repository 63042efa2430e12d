"""Reads for push delivery: listings for the tenant console, and the webhook dead-letter sink
(webhooks.md §Durability, RFC 0188). Every read is scoped to one tenant; the ones taking a run or a
webhook take a row the caller already resolved as readable (run_get_readable / webhook_get)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Count, Min, Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from apps.core.cursors import cursor_after, cursor_mint
from apps.push.capabilities import DEAD_LETTER_MAX_PAGE_SIZE, DEAD_LETTER_RETENTION_DAYS
from apps.push.models import Delivery, DeliveryStatus, PushConfig, Webhook
from apps.push.services import webhook_get
from apps.runs.models import Run
from apps.runs.wire import wire_timestamp
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject

_CURSOR_SALT = "openwop.push.dead-letters.cursor"
LISTING_LIMIT = 50


def push_configs_of_tenant(*, tenant: Tenant | int, limit: int = LISTING_LIMIT) -> list[PushConfig]:
    """The tenant's push configs with their task, newest first."""
    rows = PushConfig.objects.for_tenant(tenant).select_related("run").order_by("-created_at", "-id")
    return list(rows[:limit])


def webhooks_of_tenant(*, tenant: Tenant | int, limit: int = LISTING_LIMIT) -> list[Webhook]:
    """The tenant's webhooks, newest first."""
    return list(Webhook.objects.for_tenant(tenant).order_by("-created_at", "-id")[:limit])


def _with_attempts(rows: Any, limit: int) -> list[Delivery]:
    """Deliveries newest first with their attempt rows in one extra query (not one per delivery)."""
    return list(rows.prefetch_related("attempt_rows").order_by("-created_at", "-id")[:limit])


def task_push_deliveries(*, run: Run, limit: int = LISTING_LIMIT) -> list[Delivery]:
    """The push-config deliveries of one readable task, with attempts."""
    rows = Delivery.objects.for_tenant(run.tenant_id).filter(run=run, push_config__isnull=False)
    return _with_attempts(rows, limit)


def deliveries_needing_attention(*, tenant: Tenant | int, limit: int = LISTING_LIMIT) -> list[Delivery]:
    """The tenant's deliveries someone should look at, newest first: dead ones still in the
    dead-letter window, and pending ones whose attempts have started failing (still retrying).
    With their run, target and attempts; what a row shows of the target is the console's choice."""
    failing = Q(status=DeliveryStatus.PENDING, attempts__gt=0)
    dead = Q(status=DeliveryStatus.DEAD, settled_at__gte=timezone.now() - timedelta(days=DEAD_LETTER_RETENTION_DAYS))
    rows = Delivery.objects.for_tenant(tenant).filter(failing | dead).select_related("run", "push_config", "webhook")
    return _with_attempts(rows, limit)


def webhook_deliveries(*, webhook: Webhook, limit: int = LISTING_LIMIT) -> list[Delivery]:
    """The deliveries of one readable webhook (any status, dead letters included), with attempts."""
    rows = Delivery.objects.for_tenant(webhook.tenant_id).filter(webhook=webhook).select_related("run")
    return _with_attempts(rows, limit)


DEAD_LETTER_DEFAULT_PAGE_SIZE = 50


@dataclass(frozen=True)
class DeadLetterPage:
    records: list[dict[str, Any]]
    next_cursor: str | None


def webhook_dead_letters(
    *, subject: Subject, webhook_id: str, limit: int = DEAD_LETTER_DEFAULT_PAGE_SIZE, cursor: str | None = None
) -> DeadLetterPage:
    """One page of the dead-lettered deliveries of one of the caller's webhooks, newest first,
    keyset-paginated. The webhook is resolved first, so a foreign or unknown webhook id is the
    same NotFound whatever the cursor. `limit` is clamped to the advertised maxPageSize. A record
    names a delivery; it never carries the body, the headers or the secret."""
    webhook = webhook_get(subject=subject, webhook_id=webhook_id)
    retention = timedelta(days=DEAD_LETTER_RETENTION_DAYS)
    limit = max(1, min(limit, DEAD_LETTER_MAX_PAGE_SIZE))
    rows = (
        Delivery.objects.for_tenant(webhook.tenant_id)
        .select_related("run", "event")
        .filter(webhook=webhook, status=DeliveryStatus.DEAD, settled_at__gte=timezone.now() - retention)
        .order_by("-settled_at", "-id")
    )
    if cursor is not None:
        rows = rows.filter(cursor_after(cursor, salt=_CURSOR_SALT, scope=webhook.webhook_id, field="settled_at"))
    page = list(rows[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    next_cursor = None
    if more:
        last = page[-1]
        assert last.settled_at is not None
        next_cursor = cursor_mint(salt=_CURSOR_SALT, scope=webhook.webhook_id, at=last.settled_at, pk=last.pk)
    records = [_dead_letter_record(row, webhook, retention) for row in page]
    return DeadLetterPage(records=records, next_cursor=next_cursor)


def _dead_letter_record(row: Delivery, webhook: Webhook, retention: timedelta) -> dict[str, Any]:
    assert row.settled_at is not None
    record: dict[str, Any] = {
        "deliveryId": row.delivery_id,
        "webhookId": webhook.webhook_id,
        "runId": row.run.run_id,
        "eventId": row.event.event_id,
        "eventType": row.event_type,
        "sequence": row.event.sequence,
        "attempts": row.attempts,
        "deadLetteredAt": wire_timestamp(row.settled_at),
        "expiresAt": wire_timestamp(row.settled_at + retention),
    }
    if row.last_status_code is not None:
        record["lastStatusCode"] = row.last_status_code
    if row.last_error:
        record["lastError"] = row.last_error
    return record


def push_backlog_gauges() -> Iterator[GaugeMetricFamily]:
    """/metrics' push backlog at scrape time (one indexed read): deliveries not yet settled, and the
    oldest one's age."""
    row = Delivery.unscoped_all_tenants.filter(status=DeliveryStatus.PENDING).aggregate(
        pending=Count("id"), oldest=Min("created_at")
    )
    oldest = row["oldest"]
    yield GaugeMetricFamily("openwop_push_deliveries_pending", "Deliveries not yet settled.", value=row["pending"] or 0)
    yield GaugeMetricFamily(
        "openwop_push_oldest_pending_age_seconds",
        "Age of the oldest delivery not yet settled (0 when none).",
        value=(timezone.now() - oldest).total_seconds() if oldest is not None else 0.0,
    )
