"""Reads for push delivery: the webhook dead-letter sink (webhooks.md §Durability, RFC 0188)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from apps.push.capabilities import DEAD_LETTER_MAX_PAGE_SIZE, DEAD_LETTER_RETENTION_DAYS
from apps.push.models import Delivery, DeliveryStatus
from apps.push.services import webhook_get
from apps.runs.wire import wire_timestamp
from apps.tenants.subject import Subject


def webhook_dead_letters(*, subject: Subject, webhook_id: str, limit: int = 50) -> list[dict[str, Any]]:
    """Dead-lettered deliveries of one of the caller's webhooks, newest first. A record names a
    delivery; it never carries the body, the headers or the secret."""
    webhook = webhook_get(subject=subject, webhook_id=webhook_id)
    retention = timedelta(days=DEAD_LETTER_RETENTION_DAYS)
    limit = max(1, min(limit, DEAD_LETTER_MAX_PAGE_SIZE))
    rows = (
        Delivery.objects.for_tenant(webhook.tenant_id)
        .select_related("run", "event")
        .filter(webhook=webhook, status=DeliveryStatus.DEAD, settled_at__gte=timezone.now() - retention)
        .order_by("-settled_at", "-id")[:limit]
    )
    records = []
    for row in rows:
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
        records.append(record)
    return records
