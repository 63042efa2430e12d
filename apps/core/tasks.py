"""The beat job of post-deploy backfills (settings.CELERY_BEAT_SCHEDULE "core-backfills")."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from apps.core.backfills import backfills_run_pending


@shared_task(bind=True, name="core.backfills")
def backfills_task(self: Any) -> list[str]:
    """What is pending, for OPENWOP_BACKFILL_TICK_SECONDS (a batch is never cut short; the progress
    row keeps a second worker off the same backfill)."""
    return [report.line() for report in backfills_run_pending(seconds=settings.OPENWOP_BACKFILL_TICK_SECONDS)]
