"""The beat job (settings.CELERY_BEAT_SCHEDULE "retention-apply"): one retention pass an hour."""

from __future__ import annotations

import datetime as dt
import logging

from celery import shared_task
from django.utils import timezone

from apps.retention.services import RetentionRefused, retention_apply

logger = logging.getLogger(__name__)


@shared_task(bind=True, name="retention.apply")
def retention_apply_task(self, now: str | None = None) -> list[str]:
    """One pass as of `now` (ISO 8601, only for a replay; by default the current instant). A refused
    pass (another one under way, a failed export) is logged and left to the next hour: nothing
    expired, so nothing is lost by waiting."""
    instant = dt.datetime.fromisoformat(now) if now else timezone.now()
    if timezone.is_naive(instant):
        instant = timezone.make_aware(instant, dt.UTC)
    try:
        return retention_apply(instant).lines()
    except RetentionRefused as exc:
        logger.warning("retention pass refused: %s", exc)
        return [f"refused: {exc}"]
