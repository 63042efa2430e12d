"""A push keeps its credential and its place (issue 33, item 14; interop.md §A2A push delivery),
in-process against real HTTPS receivers on loopback.

A task's pushes to one config go out in event order: a later push waits while an earlier one is
pending, and the earlier one wakes it when it settles. The config's credential is discarded only
once none of its deliveries can still be attempted, so every attempt carries it; a dead push whose
credential is gone is refused for redelivery, never sent without it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.core.errors import Conflict
from apps.push import engine, services
from apps.push.engine import delivery_attempt
from apps.push.models import Delivery, DeliveryStatus, PushConfig
from apps.push.services import PUSH_CREDENTIAL_DISCARDED, delivery_redeliver, push_config_create
from tests.core.https_receivers import Behaviour, Receiver
from tests.push.conftest import deliveries, drive, url_of
from tests.runs.conftest import Caller, advance

pytestmark = pytest.mark.django_db

TOKEN = "tok-order-5d1c-not-for-logs"


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The broker, as far as these tests go: the pks whose message was sent, in order."""
    sent: list[int] = []

    def _enqueue(*, delivery_pk: int, queue: str, countdown: float) -> None:
        sent.append(delivery_pk)

    monkeypatch.setattr(engine, "delivery_enqueue", _enqueue)
    monkeypatch.setattr(services, "delivery_enqueue", _enqueue)
    return sent


def _pushes(acme: Caller, receiver: Receiver) -> tuple[PushConfig, Delivery, Delivery]:
    run_id = acme.create_run("conformance-noop")
    config = push_config_create(subject=acme.subject, task_id=run_id, url=url_of(receiver), token=TOKEN)
    advance(run_id)
    working, completed = deliveries()
    assert (working.is_final, completed.is_final) == (False, True)
    return config, working, completed


def _states(receiver: Receiver) -> list[str]:
    return [json.loads(seen.body)["statusUpdate"]["status"]["state"] for seen in receiver.received]


def _authorizations(receiver: Receiver) -> list[str | None]:
    return [seen.headers.get("Authorization") for seen in receiver.received]


def test_a_retry_goes_out_before_the_final_push_and_with_its_credential(
    acme: Caller, receiver_for: Callable[..., Receiver], enqueued: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    """The receiver answers 500 once, then recovers. Both messages arrive at once, as on commit."""
    receiver = receiver_for(behaviour=Behaviour(fail_first=1))
    config, working, completed = _pushes(acme, receiver)
    delivery_attempt(delivery_pk=working.pk)  # 500: WORKING now waits for its retry
    with django_capture_on_commit_callbacks(execute=True):
        delivery_attempt(delivery_pk=completed.pk)  # the final push must wait behind it
    assert _states(receiver) == ["TASK_STATE_WORKING"]
    completed.refresh_from_db()
    assert (completed.status, completed.attempts) == (DeliveryStatus.PENDING, 0)
    config.refresh_from_db()
    assert config.credentials_sealed is not None  # nothing of the config has settled yet

    with django_capture_on_commit_callbacks(execute=True):
        assert drive(working).status == DeliveryStatus.DELIVERED
    assert enqueued[-1] == completed.pk  # the settled push woke the next one
    assert drive(completed).status == DeliveryStatus.DELIVERED

    assert _states(receiver) == ["TASK_STATE_WORKING", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert _authorizations(receiver) == [f"Bearer {TOKEN}"] * 3
    config.refresh_from_db()
    assert config.credentials_sealed is None and config.credentials_wiped_at is not None


def test_a_dead_push_redelivered_while_its_config_is_live_carries_its_credential(
    acme: Caller, receiver_for: Callable[..., Receiver], settings: Any, enqueued: list[int]
) -> None:
    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 1
    receiver = receiver_for(behaviour=Behaviour(fail_first=1))
    _, working, completed = _pushes(acme, receiver)
    assert drive(working).status == DeliveryStatus.DEAD
    # The final push has not gone yet: the credential stays, and an operator's redelivery has it.
    delivery_redeliver(delivery_pk=working.pk)
    assert drive(working).status == DeliveryStatus.DELIVERED
    assert drive(completed).status == DeliveryStatus.DELIVERED
    assert _states(receiver) == ["TASK_STATE_WORKING", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert _authorizations(receiver) == [f"Bearer {TOKEN}"] * 3


def test_a_dead_push_whose_credential_is_gone_is_refused_for_redelivery(
    acme: Caller, receiver_for: Callable[..., Receiver], settings: Any, enqueued: list[int]
) -> None:
    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 1
    receiver = receiver_for(behaviour=Behaviour(status=500))
    config, working, completed = _pushes(acme, receiver)
    assert drive(working).status == drive(completed).status == DeliveryStatus.DEAD
    config.refresh_from_db()
    assert config.credentials_sealed is None  # the final push settled, nothing is pending
    with pytest.raises(Conflict) as refused:
        delivery_redeliver(delivery_pk=completed.pk)
    assert refused.value.code == PUSH_CREDENTIAL_DISCARDED and refused.value.status == 409
    completed.refresh_from_db()
    assert completed.status == DeliveryStatus.DEAD
    assert _authorizations(receiver) == [f"Bearer {TOKEN}"] * 2

    # The admin's action says so, and queues nothing.
    operator = get_user_model().objects.create_superuser("push-operator", "op@example.com", "pw-9f1e-operator")
    admin = Client()
    admin.force_login(operator)
    response = admin.post(
        "/admin/push/deadletter/", {"action": "redeliver", "_selected_action": [working.pk, completed.pk]}, follow=True
    )
    assert response.status_code == 200
    text = response.content.decode()
    assert "credential was discarded" in text and "0 dead letter(s) queued" in text
    assert enqueued == [] and {d.status for d in deliveries()} == {DeliveryStatus.DEAD}


def test_a_push_is_never_sent_without_the_credential_its_config_had(
    acme: Caller, receiver_for: Callable[..., Receiver], enqueued: list[int]
) -> None:
    """Belt and braces: should a row ever be pending after its config's credential went, the
    claim dead-letters it rather than send it bare."""
    receiver = receiver_for()
    config, working, _ = _pushes(acme, receiver)
    services.push_config_credentials_wipe(config_pk=config.pk)
    delivery_attempt(delivery_pk=working.pk)
    working.refresh_from_db()
    assert (working.status, working.last_error, working.attempts) == (DeliveryStatus.DEAD, "credential_discarded", 0)
    assert receiver.received == []


def test_pushes_of_another_config_do_not_wait(
    acme: Caller, receiver_for: Callable[..., Receiver], enqueued: list[int]
) -> None:
    """The order is per config (one task, one receiver): a failing receiver holds only its own."""
    failing, healthy = receiver_for("failing.test", Behaviour(status=500)), receiver_for("healthy.test")
    run_id = acme.create_run("conformance-noop")
    for name, receiver in (("failing.test", failing), ("healthy.test", healthy)):
        push_config_create(subject=acme.subject, task_id=run_id, url=url_of(receiver, name), token=TOKEN)
    advance(run_id)
    rows = deliveries()
    for row in rows:
        delivery_attempt(delivery_pk=row.pk)
    assert _states(healthy) == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert _states(failing) == ["TASK_STATE_WORKING"]


def test_the_cross_tenant_order_is_independent(
    acme: Caller, globex: Caller, receiver_for: Callable[..., Receiver], enqueued: list[int]
) -> None:
    """Two tenants' tasks pushing to one receiver: one tenant's pending push never holds the other's."""
    receiver = receiver_for(behaviour=Behaviour(fail_first=1))
    for caller in (acme, globex):
        run_id = caller.create_run("conformance-noop")
        push_config_create(subject=caller.subject, task_id=run_id, url=url_of(receiver), token=TOKEN)
        advance(run_id)
    acme_working, _, globex_working, globex_completed = deliveries()
    delivery_attempt(delivery_pk=acme_working.pk)  # 500: acme's WORKING is pending
    delivery_attempt(delivery_pk=globex_working.pk)
    delivery_attempt(delivery_pk=globex_completed.pk)
    assert _states(receiver) == ["TASK_STATE_WORKING", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
