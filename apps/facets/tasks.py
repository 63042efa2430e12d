"""Periodic re-evaluation of the offered versions (interop.md §The refresh SLA)."""

from __future__ import annotations

from celery import shared_task

from apps.facets.services import facet_ensure, facet_refresh
from apps.facets.versions import PROTOCOLS


@shared_task(bind=True, name="facets.refresh")
def facets_refresh(self) -> list[bool]:
    results = []
    for protocol in PROTOCOLS:
        facet_ensure(protocol=protocol)
        results.append(facet_refresh(protocol=protocol).ok)
    return results
