"""Writes of host events: append one to the caller's stream; emit an RFC 0241 test event.

Code on the event loop (the protocol doors on PostgreSQL) appends durable events through
`apps.audit.group_commit.host_event_append_batched` instead; the two interleave on one stream
without gaps (see there).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from apps.audit.chain import APPEND_SQL, AppendRow, append_params, canonical_json, content_hash_of_texts
from apps.audit.errors import HostEventDeliveryMismatch
from apps.audit.host_event_types import HOST_TEST_TYPES, Delivery, host_event_type
from apps.audit.models import HostEvent, HostEventStream
from apps.audit.streams import host_event_wake_group
from apps.core.errors import NotFound, TenantMismatch, ValidationFailed
from apps.core.ids import mint_opaque
from apps.core.sse import publish_wake
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject


def host_event_append(*, subject: Subject, type: str, payload: dict[str, Any], durable: bool) -> HostEvent:
    """Append one event to the Subject's stream and wake its subscribers after commit.

    Joins the caller's transaction rather than opening a durable one: a negotiation writes its
    decision and its `negotiation.decided` record atomically (interop.md §The audit event), so a
    rolled-back decision leaves no record and no gap in the stream.
    """
    record = host_event_row(subject=subject, type=type, payload=payload, durable=durable)
    record.tenant_pk = tenant_pk = subject_tenant_pk(subject)
    event = HostEvent(
        tenant_id=tenant_pk,
        subject_id=subject.subject_id,
        subject=subject.as_wire(),
        event_id=record.event_id,
        type=type,
        payload=payload,
        durable=durable,
        at=record.at,
    )
    params = append_params([record])
    # No savepoint: any failure here propagates and rolls back the caller's whole transaction
    # (the decision with its record), which is what the record's atomicity asks for anyway.
    with transaction.atomic(savepoint=False):
        row = _append(params)
        if row is None:
            # The stream's first event: INSERT ... ON CONFLICT DO NOTHING its counter (two first
            # appends racing both land on the one row), then append like any other.
            HostEventStream.objects.for_tenant(tenant_pk).bulk_create(
                [HostEventStream(tenant_id=tenant_pk, subject_id=subject.subject_id)], ignore_conflicts=True
            )
            row = _append(params)
        if row is None:
            raise RuntimeError("a host-event stream counter vanished while being created")
        _, event.pk, event.sequence, event.prev_digest, event.digest = row
        event._state.adding = False
        event._state.db = connection.alias
        group = host_event_wake_group(tenant=subject.tenant, subject_id=subject.subject_id)
        transaction.on_commit(lambda: publish_wake(group))
    return event


@lru_cache(maxsize=1024)
def _subject_json(subject: Subject) -> str:
    """A Subject's wire JSON in canonical form (the row stores it, the chain hashes it), serialised
    once per Subject: every exchange records one event, and a caller is the same Subject request
    after request (its wire form is exactly what equality compares, so equal Subjects share it)."""
    return canonical_json(subject.as_wire())


def host_event_row(*, subject: Subject, type: str, payload: dict[str, Any], durable: bool) -> AppendRow:
    """One event as both writers append it (`subject.tenant_pk` may still be None), its content
    hashed. Refuses an unregistered type, a class other than the type's registered one, and a
    payload that is not a JSON object."""
    registered = host_event_type(type)
    if registered.durable is not durable:
        raise HostEventDeliveryMismatch(f"{type!r} is registered as {registered.delivery}")
    if not isinstance(payload, dict):
        raise TypeError("a host-event payload is a JSON object")
    row = AppendRow(
        tenant=subject.tenant,
        tenant_pk=subject.tenant_pk,
        subject_id=subject.subject_id,
        subject_text=_subject_json(subject),
        event_id=mint_opaque(),
        type=type,
        payload_text=canonical_json(payload),
        at=timezone.now(),
        durable=durable,
    )
    row.content = content_hash_of_texts(**row.texts())
    return row


def _append(params: dict[str, list[Any]]) -> tuple[Any, ...] | None:
    """Run `APPEND_SQL` (apps/audit/chain.py) for one event in the caller's transaction, which holds
    its row locks to commit; None when the stream has no counter row yet."""
    with connection.cursor() as cursor:
        cursor.execute(APPEND_SQL, params)
        return cursor.fetchone()


def host_event_emit_test(*, subject: Subject, delivery: Delivery, workspace_id: str | None = None) -> HostEvent:
    """RFC 0241 §B: one empty event of the class's reserved type, through the ordinary path."""
    test_type = host_event_type(HOST_TEST_TYPES[delivery])
    if not test_type.advertised():  # §B.2: only a class whose type hostEvents lists
        raise ValidationFailed(f"{test_type.type} is not listed in hostEvents.", details={"field": "delivery"})
    if workspace_id is not None:
        # This host has no workspaces: a workspace of another tenant is still refused as foreign
        # (RFC 0241 §B.4), every other one is unknown.
        tenant, sep, _ = workspace_id.partition("/")
        if sep and tenant != subject.tenant:
            raise TenantMismatch("The workspace belongs to another tenant.", details={"field": "workspaceId"})
        raise NotFound("No such workspace.", details={"field": "workspaceId"})
    with transaction.atomic(durable=True):
        return host_event_append(subject=subject, type=test_type.type, payload={}, durable=test_type.durable)
