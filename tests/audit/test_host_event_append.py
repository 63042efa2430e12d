"""`host_event_append`: one gap-free, append-only stream per (tenant, Subject), joining the caller's
transaction and waking subscribers only after commit."""

from __future__ import annotations

import re
import threading

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import PROTECT

from apps.audit import services
from apps.audit.errors import HostEventDeliveryMismatch, UnregisteredHostEventType
from apps.audit.host_event_types import HOST_TEST_TYPES, NEGOTIATION_DECIDED, Delivery
from apps.audit.models import AppendOnlyViolation, HostEvent, HostEventStream
from apps.audit.services import host_event_append
from apps.core.sse import wake_group_name
from apps.tenants.models import Tenant

EVENT_ID_RE = re.compile(r"^[A-Za-z0-9._~-]{16,128}$")
DURABLE = HOST_TEST_TYPES[Delivery.DURABLE]
EPHEMERAL = HOST_TEST_TYPES[Delivery.EPHEMERAL]


def _sequences(subject) -> list[int]:  # type: ignore[no-untyped-def]
    tenant = Tenant.objects.get(slug=subject.tenant)
    return list(
        HostEvent.objects.for_tenant(tenant)
        .filter(subject_id=subject.subject_id)
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )


@pytest.mark.django_db
def test_each_subject_has_its_own_gap_free_stream(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    _, bob = make_subject("acme")
    _, carol = make_subject("globex")
    written = [
        host_event_append(subject=s, type=t, payload={"n": i}, durable=t == DURABLE)
        for i, (s, t) in enumerate(
            [(alice, DURABLE), (bob, DURABLE), (alice, EPHEMERAL), (carol, DURABLE), (alice, DURABLE)]
        )
    ]
    assert _sequences(alice) == [1, 2, 3]
    assert _sequences(bob) == [1]
    assert _sequences(carol) == [1]
    first = written[0]
    assert first.subject == alice.as_wire() and first.subject_id == alice.subject_id
    assert first.tenant.slug == "acme" and written[3].tenant.slug == "globex"
    assert all(EVENT_ID_RE.match(e.event_id) for e in written)
    assert len({e.event_id for e in written}) == len(written)
    assert [e.durable for e in written] == [True, True, False, True, True]


@pytest.mark.django_db
def test_wire_document_is_the_host_event_envelope(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject()
    event = host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={"outcome": "accepted"}, durable=True)
    doc = event.as_wire()
    assert set(doc) == {"eventId", "type", "timestamp", "delivery", "payload"}  # no runId, no sequence
    assert doc["eventId"] == event.event_id
    assert doc["delivery"] == "durable"
    assert doc["payload"] == {"outcome": "accepted"}
    assert doc["timestamp"].endswith("Z")


@pytest.mark.django_db
def test_delivery_must_equal_the_registered_class(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject()
    with pytest.raises(HostEventDeliveryMismatch):
        host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={}, durable=False)
    with pytest.raises(HostEventDeliveryMismatch):
        host_event_append(subject=alice, type=EPHEMERAL, payload={}, durable=True)
    with pytest.raises(UnregisteredHostEventType):
        host_event_append(subject=alice, type="nobody.registered-this", payload={}, durable=True)
    with pytest.raises(TypeError):
        host_event_append(subject=alice, type=DURABLE, payload=["not", "an", "object"], durable=True)  # type: ignore[arg-type]
    assert _sequences(alice) == []


@pytest.mark.django_db(transaction=True)
def test_joins_the_callers_transaction(make_subject) -> None:  # type: ignore[no-untyped-def]
    """Usable inside another service's durable transaction, and rolled back with it (no gap left)."""
    _, alice = make_subject()
    with transaction.atomic(durable=True):  # what the negotiation service will hold around it
        host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={}, durable=True)
    with pytest.raises(RuntimeError, match="decision failed"), transaction.atomic(durable=True):
        host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={}, durable=True)
        raise RuntimeError("decision failed")
    host_event_append(subject=alice, type=NEGOTIATION_DECIDED, payload={}, durable=True)
    assert _sequences(alice) == [1, 2]


@pytest.mark.django_db(transaction=True)
def test_subscribers_are_woken_after_commit_only(make_subject, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject()
    woken: list[str] = []
    monkeypatch.setattr(services, "publish_wake", woken.append)
    with transaction.atomic():
        host_event_append(subject=alice, type=DURABLE, payload={}, durable=True)
        assert woken == []
    assert woken == [wake_group_name("host", alice.tenant, alice.subject_id)]
    with pytest.raises(RuntimeError), transaction.atomic():
        host_event_append(subject=alice, type=DURABLE, payload={}, durable=True)
        raise RuntimeError
    assert len(woken) == 1


@pytest.mark.django_db
def test_no_update_or_delete_path_in_code(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject()
    event = host_event_append(subject=alice, type=DURABLE, payload={}, durable=True)
    event.payload = {"tampered": True}
    with pytest.raises(AppendOnlyViolation):
        event.save()
    with pytest.raises(AppendOnlyViolation):
        event.delete()
    # Deleting the tenant must not cascade into its audit trail (checked on the field: a real
    # delete also walks every other app's tables).
    assert HostEvent._meta.get_field("tenant").remote_field.on_delete is PROTECT
    assert HostEvent.objects.for_tenant(event.tenant_id).get().payload == {}


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_stay_gap_free(make_subject) -> None:  # type: ignore[no-untyped-def]
    """Threads on separate connections race first appends and later ones on the same two streams."""
    _, alice = make_subject()
    _, bob = make_subject()
    threads_count, per_thread = 8, 12
    barrier = threading.Barrier(threads_count)
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                subject = alice if (index + i) % 2 else bob
                host_event_append(subject=subject, type=DURABLE, payload={"t": index, "i": i}, durable=True)
        except BaseException as exc:  # surfaced below, with the thread's failure
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    half = threads_count * per_thread // 2
    assert _sequences(alice) == list(range(1, half + 1))
    assert _sequences(bob) == list(range(1, half + 1))
    tenant = Tenant.objects.get(slug="acme")
    counters = dict(HostEventStream.objects.for_tenant(tenant).values_list("subject_id", "last_sequence"))
    assert counters == {alice.subject_id: half, bob.subject_id: half}


@pytest.mark.django_db
def test_database_refuses_update_and_delete(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject()
    event = host_event_append(subject=alice, type=DURABLE, payload={}, durable=True)
    rows = HostEvent.objects.for_tenant(event.tenant_id).filter(pk=event.pk)
    attempts = [
        lambda: rows.update(payload={"tampered": True}),
        lambda: rows.delete(),
        lambda: connection.cursor().execute("UPDATE audit_hostevent SET type = 'x.y' WHERE id = %s", [event.pk]),
        lambda: connection.cursor().execute("DELETE FROM audit_hostevent WHERE id = %s", [event.pk]),
    ]
    for attempt in attempts:
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            attempt()
    assert rows.get().payload == {} and rows.get().type == DURABLE
