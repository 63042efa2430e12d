"""Reads for auditors: every `negotiation.decided` record the host wrote, wherever it lives.

A record is on a run's log (a decision made inside a run) or is a durable host event of the
caller (no run). Both tables are append-only (code, and on PostgreSQL triggers), so this module
only reads. `downgraded` is derived, as interop.md §Downgrade above the floor defines it: an
`accepted` record whose `version` is not the `requested` one.

The list pages newest first with a keyset cursor over (at, home, id), so page n costs what page 1
costs. The charts read `NegotiationDailyCount`, the daily rollup the database's triggers keep as
records are inserted (audit migration 0005), never the record tables.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import heapq
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any, Literal

from django.db.models import Q, QuerySet, Sum

from apps.audit.host_event_types import NEGOTIATION_DECIDED
from apps.audit.models import HostEvent, NegotiationDailyCount
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
    position: tuple[dt.datetime, int, int] = (dt.datetime.min.replace(tzinfo=dt.UTC), 0, 0)  # (at, home, id)
    # Where the record itself is read: a host event's row (with its hash-chain digest,
    # apps/audit/chain.py), or the run whose log holds it (run logs are not hash-chained: "").
    host_event_pk: int | None = None
    run_pk: int | None = None
    digest: str = ""


# The two homes of a record, ranked for the total order (at, home, id) the list pages by.
_HOST_EVENT, _RUN_EVENT = 0, 1


def negotiation_cursor(position: tuple[dt.datetime, int, int]) -> str:
    """The opaque cursor naming a record's place in the newest-first order."""
    at, home, pk = position
    return base64.urlsafe_b64encode(f"{at.isoformat()}|{home}|{pk}".encode()).decode().rstrip("=")


def _cursor_position(cursor: str) -> tuple[dt.datetime, int, int] | None:
    """The position a cursor names, or None for anything that is not one of ours (the first page)."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at_text, home_text, pk_text = text.split("|")
        at, home, pk = dt.datetime.fromisoformat(at_text), int(home_text), int(pk_text)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if at.tzinfo is None or home not in (_HOST_EVENT, _RUN_EVENT):
        return None
    return at, home, pk


def _older_than(home: int, position: tuple[dt.datetime, int, int] | None) -> Q:
    """Rows of `home` strictly after `position` in the newest-first (at, home, id) order."""
    if position is None:
        return Q()
    at, cursor_home, pk = position
    if home < cursor_home:
        return Q(at__lte=at)
    if home == cursor_home:
        return Q(at__lt=at) | Q(at=at, pk__lt=pk)
    return Q(at__lt=at)


def outcome_class(payload: dict[str, Any]) -> OutcomeClass:
    if payload.get("outcome") != "accepted":
        return "refused"
    requested = payload.get("requested")
    return "downgraded" if requested is not None and payload.get("version") != requested else "accepted"


# Each filter as a lookup on the records (their payload) and on the daily rollup; unset ones match all.
_RECORD_LOOKUPS = {
    "protocol": "payload__protocol",
    "tenant": "tenant__slug",
    "since": "at__date__gte",
    "until": "at__date__lte",
    "requested": "payload__requested",
}
_ROLLUP_LOOKUPS = {
    "protocol": "protocol",
    "outcome": "outcome",
    "tenant": "tenant__slug",
    "since": "day__gte",
    "until": "day__lte",
    "requested": "requested",
}


def _lookups(filters: NegotiationFilters, lookups: dict[str, str]) -> dict[str, Any]:
    return {lookup: value for name, lookup in lookups.items() if (value := getattr(filters, name))}


def _filtered(queryset: QuerySet[Any], filters: NegotiationFilters) -> QuerySet[Any]:
    queryset = queryset.filter(type=NEGOTIATION_DECIDED, **_lookups(filters, _RECORD_LOOKUPS))
    if filters.outcome == "refused":
        queryset = queryset.filter(payload__outcome="refused")
    elif filters.outcome in ("accepted", "downgraded"):
        queryset = queryset.filter(payload__outcome="accepted")
    return queryset.select_related("tenant").order_by("-at", "-pk")


def _record(event: RunEvent | HostEvent) -> NegotiationRecord:
    payload = event.payload
    location = f"run {event.run.run_id}" if isinstance(event, RunEvent) else f"host event {event.event_id}"
    home = _RUN_EVENT if isinstance(event, RunEvent) else _HOST_EVENT
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
        position=(event.at, home, event.pk),
        host_event_pk=event.pk if isinstance(event, HostEvent) else None,
        run_pk=event.run.pk if isinstance(event, RunEvent) else None,
        digest=event.digest if isinstance(event, HostEvent) else "",
    )


def negotiation_records(
    *, filters: NegotiationFilters, limit: int | None = None, after: str | None = None
) -> Iterator[NegotiationRecord]:
    """Newest first across both homes of the record, merged by (at, home, id); `limit` caps the
    count and `after` (a `negotiation_cursor`) starts just past that record."""
    position = _cursor_position(after) if after else None
    run_events = RunEvent.unscoped_all_tenants.select_related("run").filter(_older_than(_RUN_EVENT, position))
    host_events = HostEvent.unscoped_all_tenants.filter(_older_than(_HOST_EVENT, position))
    streams = [
        (_record(e) for e in _filtered(run_events, filters).iterator(chunk_size=500)),
        (_record(e) for e in _filtered(host_events, filters).iterator(chunk_size=500)),
    ]
    merged = heapq.merge(*streams, key=lambda record: record.position, reverse=True)
    yield from islice((r for r in merged if not filters.outcome or r.outcome_class == filters.outcome), limit)


def negotiation_page(
    *, filters: NegotiationFilters, after: str | None, size: int
) -> tuple[list[NegotiationRecord], str | None]:
    """One page of records and the cursor of the next page (None on the last page)."""
    records = list(negotiation_records(filters=filters, limit=size + 1, after=after))
    if len(records) <= size:
        return records, None
    return records[:size], negotiation_cursor(records[size - 1].position)


def negotiation_daily_query(*, filters: NegotiationFilters) -> QuerySet[Any]:
    """The charts' one query: (protocol, day, outcome, n) summed from the rollup, never the records."""
    rows = NegotiationDailyCount.unscoped_all_tenants.filter(**_lookups(filters, _ROLLUP_LOOKUPS))
    return rows.values_list("protocol", "day", "outcome").annotate(n=Sum("count")).order_by()


def negotiation_daily_totals(
    *, filters: NegotiationFilters
) -> list[tuple[str, list[tuple[dt.date, dict[OutcomeClass, int]]]]]:
    """Per protocol, per-day counts of accepted / downgraded / refused over every matching record,
    oldest day first, summed from the daily rollup (its size follows days, not records)."""
    totals = negotiation_daily_query(filters=filters)
    per_protocol: dict[str, dict[dt.date, Counter[str]]] = {}
    for protocol, day, outcome, n in totals:
        per_protocol.setdefault(protocol, {}).setdefault(day, Counter())[outcome] += n
    return [
        (protocol, [(day, {c: days[day][c] for c in OUTCOME_CLASSES}) for day in sorted(days)])
        for protocol, days in sorted(per_protocol.items())
    ]
