"""Reads for auditors: every `negotiation.decided` record the host wrote, wherever it lives.

A record is on a run's log (a decision made inside a run) or is a durable host event of the
caller (no run). Both tables are append-only (code, and on PostgreSQL triggers), so this module
only reads. `downgraded` is derived, as interop.md §Downgrade above the floor defines it: an
`accepted` record whose `version` is not the `requested` one.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from django.db.models import QuerySet

from apps.audit.models import HostEvent
from apps.facets.negotiation import NEGOTIATION_EVENT
from apps.runs.models import RunEvent

OutcomeClass = Literal["accepted", "downgraded", "refused"]
OUTCOME_CLASSES: tuple[OutcomeClass, ...] = ("accepted", "downgraded", "refused")


@dataclass(frozen=True, slots=True)
class NegotiationFilters:
    protocol: str | None = None
    outcome: OutcomeClass | None = None
    tenant: str | None = None
    since: dt.date | None = None
    until: dt.date | None = None  # inclusive
    requested: str | None = None


@dataclass(frozen=True, slots=True)
class NegotiationRecord:
    at: dt.datetime
    tenant: str
    protocol: str
    outcome_class: OutcomeClass
    requested: str
    version: str
    reason: str
    floor: str
    peer_digest: str
    location: str  # "run <runId>" or "host event <eventId>"


def outcome_class(payload: dict[str, Any]) -> OutcomeClass:
    if payload.get("outcome") != "accepted":
        return "refused"
    requested = payload.get("requested")
    return "downgraded" if requested is not None and payload.get("version") != requested else "accepted"


def _filtered(queryset: QuerySet[Any], filters: NegotiationFilters) -> QuerySet[Any]:
    queryset = queryset.filter(type=NEGOTIATION_EVENT)
    if filters.protocol:
        queryset = queryset.filter(payload__protocol=filters.protocol)
    if filters.tenant:
        queryset = queryset.filter(tenant__slug=filters.tenant)
    if filters.since:
        queryset = queryset.filter(at__date__gte=filters.since)
    if filters.until:
        queryset = queryset.filter(at__date__lte=filters.until)
    if filters.requested:
        queryset = queryset.filter(payload__requested=filters.requested)
    if filters.outcome == "refused":
        queryset = queryset.filter(payload__outcome="refused")
    elif filters.outcome in ("accepted", "downgraded"):
        queryset = queryset.filter(payload__outcome="accepted")
    return queryset.select_related("tenant").order_by("-at")


def _record(event: RunEvent | HostEvent) -> NegotiationRecord:
    payload = event.payload
    location = f"run {event.run.run_id}" if isinstance(event, RunEvent) else f"host event {event.event_id}"
    return NegotiationRecord(
        at=event.at,
        tenant=event.tenant.slug,
        protocol=str(payload.get("protocol", "")),
        outcome_class=outcome_class(payload),
        requested=str(payload.get("requested", "")),
        version=str(payload.get("version", "")),
        reason=str(payload.get("reason", "")),
        floor=str(payload.get("floor", "")),
        peer_digest=str(payload.get("peerDigest", "")),
        location=location,
    )


def negotiation_records(*, filters: NegotiationFilters, limit: int | None = None) -> Iterator[NegotiationRecord]:
    """Newest first across both homes of the record, merged by time; `limit` caps the count."""
    streams = [
        (_record(e) for e in _filtered(RunEvent.unscoped_all_tenants.select_related("run"), filters).iterator()),
        (_record(e) for e in _filtered(HostEvent.unscoped_all_tenants.all(), filters).iterator()),
    ]
    heads: list[NegotiationRecord | None] = [next(s, None) for s in streams]
    emitted = 0
    while any(h is not None for h in heads) and (limit is None or emitted < limit):
        index = max((i for i, h in enumerate(heads) if h is not None), key=lambda i: heads[i].at)  # type: ignore[union-attr]
        record = heads[index]
        heads[index] = next(streams[index], None)
        assert record is not None
        if filters.outcome and record.outcome_class != filters.outcome:
            continue
        emitted += 1
        yield record


def negotiation_daily_counts(records: list[NegotiationRecord]) -> list[tuple[dt.date, dict[OutcomeClass, int]]]:
    """Per-day counts of accepted / downgraded / refused, oldest day first."""
    counts: dict[dt.date, Counter[OutcomeClass]] = {}
    for record in records:
        counts.setdefault(record.at.date(), Counter())[record.outcome_class] += 1
    return [(day, {c: counts[day][c] for c in OUTCOME_CLASSES}) for day in sorted(counts)]
