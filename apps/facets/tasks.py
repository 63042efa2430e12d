"""Periodic re-evaluation of the offered versions (interop.md §The refresh SLA), and scheduled
floors (issue 24) applied on their date."""

from __future__ import annotations

import datetime as dt

from celery import shared_task
from django.utils import timezone

from apps.core.protocol_versions import PROTOCOLS
from apps.facets.services import facet_ensure, facet_refresh, scheduled_floors_apply


def task_instant(now: str | None) -> dt.datetime:
    """A beat task's instant: `now` (ISO 8601, UTC without an offset) for a replay, else the current one."""
    instant = dt.datetime.fromisoformat(now) if now else timezone.now()
    return timezone.make_aware(instant, dt.UTC) if timezone.is_naive(instant) else instant


@shared_task(bind=True, name="facets.refresh")
def facets_refresh(self) -> list[bool]:
    results = []
    for protocol in PROTOCOLS:
        facet_ensure(protocol=protocol)
        results.append(facet_refresh(protocol=protocol).ok)
    return results


@shared_task(bind=True, name="facets.apply_scheduled_floors")
def facets_apply_scheduled_floors(self, now: str | None = None) -> int:
    """Every scheduled host and policy floor whose date has come, applied and audited (idempotent:
    beat may run it twice)."""
    return scheduled_floors_apply(now=task_instant(now))
