"""A slow receiver cannot stretch an attempt or buy extra ones (issue 33, item 15), in-process
against real HTTPS receivers on loopback that drip one byte at a time.

Every attempt has an overall deadline (the attempt timeout: connect, TLS, headers and body
together), shorter than its claim; the attempt budget is checked when an attempt is claimed, so a
claim that lapsed (its worker died) cannot start an attempt past `max_attempts`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import trustme
from django.utils import timezone

from apps.push.engine import attempt_timeout_seconds, claim_seconds, delivery_attempt
from apps.push.models import Delivery, DeliveryAttempt, DeliveryStatus, PushConfig
from apps.push.services import push_config_create, webhook_register
from tests.core.drip_receivers import Dripping, dripping_receiver
from tests.core.https_receivers import Receiver
from tests.core.test_egress import FakeDns
from tests.live import wait_until
from tests.push.conftest import deliveries, drive, url_of
from tests.runs.conftest import Caller, advance

pytestmark = pytest.mark.django_db

TOKEN = "tok-limits-8a2f-not-for-logs"


@pytest.fixture
def drip(ca: trustme.CA, dns: FakeDns, settings: Any) -> Iterator[Dripping]:
    settings.OPENWOP_PUSH_ATTEMPT_TIMEOUT = 1.0  # each dripped byte comes far sooner
    with dripping_receiver(ca, "drip.test", phase="headers", drip_for=20.0) as live:
        dns.set("drip.test", ["127.0.0.1"])
        yield live


def test_the_attempt_deadline_is_shorter_than_the_claim(settings: Any) -> None:
    for timeout in (0.5, 5.0, 30.0):
        settings.OPENWOP_PUSH_ATTEMPT_TIMEOUT = timeout
        assert attempt_timeout_seconds() < claim_seconds()


def test_a_dripping_receiver_gets_max_attempts_each_ended_at_its_deadline(
    acme: Caller, drip: Dripping, settings: Any
) -> None:
    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 2
    webhook_register(subject=acme.subject, url=f"https://drip.test:{drip.port}/hook", events=["run.completed"])
    advance(acme.create_run("conformance-noop"))
    [row] = deliveries()
    assert drive(row).status == DeliveryStatus.DEAD
    errors = list(DeliveryAttempt.unscoped_all_tenants.filter(delivery=row).values_list("error", flat=True))
    assert errors == ["timeout", "timeout"]
    wait_until(lambda: drip.stats.hung_up == 2, "the receiver to see both attempts hang up", timeout=10)
    assert (drip.stats.connections, len(drip.stats.requests)) == (2, 2)


def test_the_attempt_budget_is_checked_when_an_attempt_is_claimed(
    acme: Caller, receiver_for: Callable[..., Receiver], settings: Any
) -> None:
    """The last attempt was claimed and its worker died (the claim lapsed, no outcome recorded):
    the sweeper's message must not start a sixth attempt; the row is dead-lettered."""
    receiver = receiver_for()
    run_id = acme.create_run("conformance-noop")
    config = push_config_create(subject=acme.subject, task_id=run_id, url=url_of(receiver), token=TOKEN)
    advance(run_id)
    working, completed = deliveries()
    assert drive(working).status == DeliveryStatus.DELIVERED
    lapsed = timezone.now() - timedelta(seconds=1)
    Delivery.unscoped_all_tenants.filter(pk=completed.pk).update(
        attempts=settings.OPENWOP_PUSH_MAX_ATTEMPTS, in_flight_until=lapsed, next_attempt_at=lapsed
    )
    delivery_attempt(delivery_pk=completed.pk)
    completed.refresh_from_db()
    assert (completed.status, completed.last_error) == (DeliveryStatus.DEAD, "attempt_lost")
    assert completed.attempts == settings.OPENWOP_PUSH_MAX_ATTEMPTS and completed.settled_at is not None
    assert len(receiver.received) == 1  # only the WORKING push went out
    # It was the config's last deliverable push: its credential goes now.
    assert PushConfig.unscoped_all_tenants.get(pk=config.pk).credentials_sealed is None


def test_a_late_outcome_does_not_overwrite_the_attempt_that_holds_the_row(
    acme: Caller, receiver_for: Callable[..., Receiver]
) -> None:
    """Belt and braces for a claim that lapsed anyway: the stale attempt's outcome is kept as a
    row, and the row's state stays with the attempt that holds it now."""
    from apps.push import engine

    receiver = receiver_for()
    webhook_register(subject=acme.subject, url=url_of(receiver), events=["run.completed"])
    advance(acme.create_run("conformance-noop"))
    [row] = deliveries()
    stale = engine._claim(row.pk)
    assert stale is not None
    Delivery.unscoped_all_tenants.filter(pk=row.pk).update(in_flight_until=timezone.now() - timedelta(seconds=1))
    current = engine._claim(row.pk)
    assert current is not None and current.number == stale.number + 1
    engine._record(stale, ok=False, status_code=500, error="http_500", latency_ms=1)
    row.refresh_from_db()
    assert row.status == DeliveryStatus.PENDING and row.in_flight_until is not None  # still claimed
    engine._send(current)
    row.refresh_from_db()
    numbers = list(DeliveryAttempt.unscoped_all_tenants.filter(delivery=row).values_list("number", "error"))
    assert (row.status, numbers) == (DeliveryStatus.DELIVERED, [(1, "http_500"), (2, "")])
