"""Reads of host-event streams: where a subscriber starts, and what it is sent next.

A subscriber only ever reads its own stream: the caller's tenant AND the caller's Subject
(events.md §Host events; RFC 0236 §D tenant isolation).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Max, Q, QuerySet

from apps.audit.errors import HostEventResyncRequired
from apps.audit.models import HostEvent
from apps.core.errors import ValidationFailed
from apps.core.ids import OPAQUE_RE
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject


@dataclass(frozen=True, slots=True)
class HostEventCursor:
    """One subscription: whose stream, where it resumes, and where live delivery begins."""

    tenant_id: int
    tenant: str
    subject_id: str
    after: int  # send events with a greater sequence...
    live_from: int  # ...but at or below this (the head when the subscriber connected) only durable ones


def _stream(*, tenant_id: int, subject_id: str) -> QuerySet[HostEvent]:
    return HostEvent.objects.for_tenant(tenant_id).filter(subject_id=subject_id)


def host_event_cursor_open(*, subject: Subject, last_event_id: str | None) -> HostEventCursor:
    """Position a new subscriber.

    Without `Last-Event-ID` it gets live events only. With one, it first gets the durable events
    after the named event, then live ones: ephemeral events that were already written when it
    connected are never sent again (RFC 0236 §C, "never redelivered").
    """
    tenant_id = subject_tenant_pk(subject)
    stream = _stream(tenant_id=tenant_id, subject_id=subject.subject_id)
    head = stream.aggregate(head=Max("sequence"))["head"] or 0
    after = head
    if last_event_id:
        if not OPAQUE_RE.match(last_event_id):
            raise ValidationFailed(
                "Last-Event-ID must be the eventId of a durable host event.", details={"field": "Last-Event-ID"}
            )
        resumed = stream.filter(event_id=last_event_id, durable=True).values_list("sequence", flat=True).first()
        if resumed is None:
            raise HostEventResyncRequired()
        after = resumed
    return HostEventCursor(
        tenant_id=tenant_id, tenant=subject.tenant, subject_id=subject.subject_id, after=after, live_from=head
    )


def host_events_after(*, cursor: HostEventCursor, after: int, limit: int = 200) -> list[HostEvent]:
    """The next events of the cursor's stream after position `after`, in sequence order."""
    return list(
        _stream(tenant_id=cursor.tenant_id, subject_id=cursor.subject_id)
        .filter(Q(sequence__gt=after), Q(durable=True) | Q(sequence__gt=cursor.live_from))
        .order_by("sequence")[:limit]
    )
