"""Per-destination lanes, in-process (apps/push/lanes.py; webhooks.md §Durability, invariant
webhook-delivery-isolation): a full lane parks a delivery instead of sending it, the attempt that
frees the lane wakes the oldest parked row, the sweeper wakes a lane whose holder died, and the
hot-path probe costs one query when nothing is registered."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.push import engine, lanes, services
from apps.push.engine import deliveries_sweep, delivery_attempt
from apps.push.lanes import lane_of
from apps.push.models import Delivery, DeliveryStatus, PushLane
from apps.push.services import push_deliveries_for_events, webhook_register
from apps.runs.models import Run, RunEvent
from tests.core.https_receivers import Receiver
from tests.push.conftest import deliveries, url_of
from tests.runs.conftest import Caller, advance

pytestmark = pytest.mark.django_db


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The broker, as far as these tests go: the pks whose message was sent (nothing consumes them)."""
    sent: list[int] = []

    def _enqueue(*, delivery_pk: int, queue: str, countdown: float) -> None:
        sent.append(delivery_pk)

    monkeypatch.setattr(engine, "delivery_enqueue", _enqueue)
    monkeypatch.setattr(services, "delivery_enqueue", _enqueue)
    return sent


def _two_deliveries_to_one_lane(acme: Caller, receiver: Receiver) -> tuple[Delivery, Delivery]:
    webhook_register(subject=acme.subject, url=url_of(receiver), events=["node.started", "run.completed"])
    advance(acme.create_run("conformance-noop"))
    first, second = deliveries()
    assert first.lane == second.lane == lane_of(url_of(receiver))
    return first, second


def test_the_lane_is_the_origin_and_nothing_more() -> None:
    assert lane_of("https://User:pw@Hooks.Example.COM/p/a?token=s3cret#x") == "https://hooks.example.com:443"
    assert lane_of("https://hooks.example.com:8443/other") == "https://hooks.example.com:8443"
    assert lane_of("https://[2001:DB8::1]:9/") == "https://[2001:db8::1]:9"


def test_a_full_lane_parks_and_the_attempt_that_frees_it_wakes_the_oldest(
    acme: Caller,
    receiver_for: Callable[..., Receiver],
    settings: Any,
    enqueued: list[int],
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.OPENWOP_PUSH_LANE_CAP = 1
    receiver = receiver_for()
    first, second = _two_deliveries_to_one_lane(acme, receiver)
    # An attempt of `first` is under way on another worker: the lane's one slot is taken.
    now = timezone.now()
    Delivery.unscoped_all_tenants.filter(pk=first.pk).update(attempts=1, in_flight_until=now + timedelta(seconds=60))
    delivery_attempt(delivery_pk=second.pk)
    second.refresh_from_db()
    assert (second.parked, second.attempts, second.status) == (True, 0, DeliveryStatus.PENDING)
    assert receiver.received == []
    assert PushLane.objects.filter(origin=second.lane).count() == 1

    # The holder's claim ends (its attempt comes back): the slot is free, the freeing attempt
    # wakes the parked row, and the woken message sends it.
    Delivery.unscoped_all_tenants.filter(pk=first.pk).update(in_flight_until=None)
    with django_capture_on_commit_callbacks(execute=True):
        delivery_attempt(delivery_pk=first.pk)
    assert enqueued == [second.pk]
    second.refresh_from_db()
    assert second.parked is False
    delivery_attempt(delivery_pk=second.pk)
    assert [r.status for r in deliveries()] == [DeliveryStatus.DELIVERED, DeliveryStatus.DELIVERED]
    assert len(receiver.received) == 2


def test_a_new_delivery_joins_its_lanes_backlog_without_a_message(
    acme: Caller,
    receiver_for: Callable[..., Receiver],
    settings: Any,
    enqueued: list[int],
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.OPENWOP_PUSH_LANE_CAP = 1
    receiver = receiver_for()
    first, second = _two_deliveries_to_one_lane(acme, receiver)
    Delivery.unscoped_all_tenants.filter(pk=first.pk).update(in_flight_until=timezone.now() + timedelta(seconds=60))
    delivery_attempt(delivery_pk=second.pk)  # parks: the lane has a backlog now
    with django_capture_on_commit_callbacks(execute=True):
        advance(acme.create_run("conformance-noop"))
    newer = Delivery.unscoped_all_tenants.exclude(pk__in=[first.pk, second.pk])
    assert newer.count() == 2 and all(row.parked for row in newer)
    assert enqueued == []  # the lane is full: no message, no pool slot, until it has room
    # When it has room, the backlog goes oldest first.
    Delivery.unscoped_all_tenants.filter(pk=first.pk).update(in_flight_until=None, status=DeliveryStatus.DELIVERED)
    assert lanes.lane_wake(first.lane, engine.delivery_enqueue) == 1 and enqueued == [second.pk]


def test_the_cap_counts_every_live_claim_on_the_lane(
    acme: Caller, receiver_for: Callable[..., Receiver], settings: Any, enqueued: list[int]
) -> None:
    settings.OPENWOP_PUSH_LANE_CAP = 2
    receiver = receiver_for()
    first, second = _two_deliveries_to_one_lane(acme, receiver)
    Delivery.unscoped_all_tenants.filter(pk=first.pk).update(in_flight_until=timezone.now() + timedelta(seconds=60))
    delivery_attempt(delivery_pk=second.pk)  # one in flight, cap two: this one goes
    second.refresh_from_db()
    assert (second.parked, second.status, len(receiver.received)) == (False, DeliveryStatus.DELIVERED, 1)


def test_the_sweeper_wakes_a_lane_whose_holder_died_and_leaves_a_full_lane_alone(
    acme: Caller, receiver_for: Callable[..., Receiver], settings: Any, enqueued: list[int]
) -> None:
    settings.OPENWOP_PUSH_LANE_CAP = 1
    settings.OPENWOP_PUSH_SWEEP_GRACE_SECONDS = 0.0
    first, second = _two_deliveries_to_one_lane(acme, receiver_for())
    now = timezone.now()
    Delivery.unscoped_all_tenants.filter(pk=first.pk).update(attempts=1, in_flight_until=now + timedelta(seconds=60))
    delivery_attempt(delivery_pk=second.pk)
    Delivery.unscoped_all_tenants.filter(pk=second.pk).update(next_attempt_at=now - timedelta(minutes=1))
    assert deliveries_sweep() == 0 and enqueued == []  # the holder is alive: the parked row waits
    # The holder's worker was killed: its claim expires, and no attempt will ever wake the lane.
    Delivery.unscoped_all_tenants.filter(pk=first.pk).update(
        in_flight_until=now - timedelta(seconds=1), next_attempt_at=now - timedelta(minutes=1)
    )
    assert deliveries_sweep() == 2
    assert sorted(enqueued) == sorted([first.pk, second.pk])
    assert not Delivery.unscoped_all_tenants.get(pk=second.pk).parked


def test_senders_refuse_past_their_limit(settings: Any) -> None:
    settings.OPENWOP_PUSH_SENDERS = 2
    pool = lanes.Senders()
    assert pool.reserve() and pool.reserve()
    assert not pool.reserve()
    pool.release()
    assert pool.reserve()


def test_nothing_registered_costs_one_query_per_event(acme: Caller, django_assert_num_queries: Any) -> None:
    run_id = acme.create_run("conformance-noop")
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    event = RunEvent.unscoped_all_tenants.filter(run=run).order_by("sequence").last()
    assert event is not None
    webhook_register(subject=acme.subject, url="https://hooks.example.com/h", events=["some.other.type"])
    with django_assert_num_queries(1):
        push_deliveries_for_events(run=run, events=[event])
    assert deliveries() == []


def test_a_webhook_registered_mid_run_gets_the_events_after_it(
    acme: Caller, receiver_for: Callable[..., Receiver], globex: Caller
) -> None:
    run_id = acme.create_run("conformance-noop")
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    before = list(RunEvent.unscoped_all_tenants.filter(run=run).values_list("type", flat=True))
    receiver = receiver_for()
    webhook_register(subject=acme.subject, url=url_of(receiver), events=[*before, "node.started", "run.completed"])
    webhook_register(subject=globex.subject, url=url_of(receiver), events=["node.started", "run.completed"])
    advance(run_id)
    rows = deliveries()
    # Only the events appended after registration, and only for the run's own tenant.
    assert [r.event_type for r in rows] == ["node.started", "run.completed"]
    assert {r.tenant_id for r in rows} == {run.tenant_id}
