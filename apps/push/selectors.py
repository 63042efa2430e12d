"""Reads for push delivery: the webhook dead-letter sink (webhooks.md §Durability, RFC 0188)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core import signing
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.core.errors import ValidationFailed
from apps.push.capabilities import DEAD_LETTER_MAX_PAGE_SIZE, DEAD_LETTER_RETENTION_DAYS
from apps.push.models import Delivery, DeliveryStatus, Webhook
from apps.push.services import webhook_get
from apps.runs.wire import wire_timestamp
from apps.tenants.subject import Subject

_CURSOR_SALT = "openwop.push.dead-letters.cursor"
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
        settled_at, pk = _cursor_position(cursor, webhook_id=webhook.webhook_id)
        rows = rows.filter(Q(settled_at__lt=settled_at) | Q(settled_at=settled_at, id__lt=pk))
    page = list(rows[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    next_cursor = _cursor_mint(page[-1], webhook_id=webhook.webhook_id) if more else None
    records = [_dead_letter_record(row, webhook, retention) for row in page]
    return DeadLetterPage(records=records, next_cursor=next_cursor)


def _cursor_mint(row: Delivery, *, webhook_id: str) -> str:
    assert row.settled_at is not None
    return signing.dumps({"w": webhook_id, "s": row.settled_at.isoformat(), "i": row.pk}, salt=_CURSOR_SALT)


def _cursor_position(cursor: str, *, webhook_id: str) -> tuple[datetime, int]:
    """A cursor this host minted for this webhook's listing, or 400: a cursor names a position in
    one listing (signed, so it cannot be forged or moved to another webhook)."""
    try:
        data = signing.loads(cursor, salt=_CURSOR_SALT)
        settled_at = parse_datetime(data["s"])
        if data["w"] != webhook_id or settled_at is None or not isinstance(data["i"], int):
            raise ValueError("cursor of another listing")
    except (signing.BadSignature, KeyError, TypeError, ValueError) as exc:
        raise ValidationFailed("The cursor was not minted by this host.", details={"field": "cursor"}) from exc
    return settled_at, data["i"]


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
