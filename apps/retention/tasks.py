"""The beat job (settings.CELERY_BEAT_SCHEDULE "retention-apply"): one retention pass an hour."""

from __future__ import annotations

import logging

from celery import shared_task

from apps.core.jobs import job_failed
from apps.facets.tasks import task_instant
from apps.retention.services import RETENTION_JOB, RetentionRefused, retention_apply

logger = logging.getLogger(__name__)


@shared_task(bind=True, name="retention.apply")
def retention_apply_task(self, now: str | None = None) -> list[str]:
    """One pass as of `now` (`task_instant`). A refused pass (another one under way, a failed
    export) is logged, recorded as the job's failure, and left to the next hour: nothing expired,
    so nothing is lost by waiting."""
    try:
        return retention_apply(task_instant(now)).lines()
    except RetentionRefused as exc:
        logger.warning("retention pass refused: %s", exc)
        job_failed(RETENTION_JOB)  # not a success: /metrics' last success stays where it was
        return [f"refused: {exc}"]
