"""A2A push delivery end to end, in-process: real HTTPS receivers on loopback, the engine driven
synchronously (interop.md §A2A push delivery; webhooks.md §Durability)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from a2a.types import StreamResponse, TaskState
from django.utils import timezone
from google.protobuf import json_format

from apps.push import engine, services
from apps.push.engine import deliveries_sweep, delivery_attempt
from apps.push.models import DeliveryAttempt, DeliveryKind, DeliveryStatus, PushConfig
from apps.push.services import push_config_create, push_config_delete
from tests.core.https_receivers import Behaviour, Receiver
from tests.push.conftest import deliveries, drive, url_of
from tests.runs.conftest import Caller, advance

pytestmark = pytest.mark.django_db

TOKEN = "tok-9c1e5b7d-not-for-logs"
CREDENTIALS = "cred-4f2a8e61-not-for-logs"


def _run_with_config(acme: Caller, url: str, **auth: Any) -> tuple[str, PushConfig]:
    run_id = acme.create_run("conformance-noop")
    config = push_config_create(subject=acme.subject, task_id=run_id, url=url, **auth)
    advance(run_id)  # node.started -> WORKING, run.completed -> COMPLETED
    return run_id, config


def test_each_state_change_is_pushed_as_a_stream_response(acme: Caller, receiver_for: Callable[..., Receiver]) -> None:
    receiver = receiver_for()
    run_id, config = _run_with_config(
        acme, url_of(receiver), authentication={"scheme": "Basic", "credentials": CREDENTIALS}
    )
    rows = deliveries()
    assert [r.kind for r in rows] == [DeliveryKind.A2A_PUSH] * 2
    assert [r.event_type for r in rows] == ["node.started", "run.completed"]
    for row in rows:
        assert drive(row).status == DeliveryStatus.DELIVERED
    first, last = receiver.received
    for seen in (first, last):
        assert seen.method == "POST" and seen.path == "/hook"
        assert seen.headers["Content-Type"] == "application/a2a+json"
        assert seen.headers["Authorization"] == f"Basic {CREDENTIALS}"
        assert not any(name.lower().startswith("openwop-") for name in seen.headers)
    states = []
    for seen in (first, last):
        doc = json.loads(seen.body)
        assert set(doc) == {"statusUpdate"}
        parsed = json_format.ParseDict(doc, StreamResponse())  # an A2A 1.0 StreamResponse, strictly
        assert parsed.status_update.task_id == run_id
        states.append(parsed.status_update.status.state)
    assert states == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED]
    # The final push settled: the credential is gone, the config stays readable.
    config.refresh_from_db()
    assert config.credentials_sealed is None and config.credentials_wiped_at is not None


def test_a_token_alone_is_sent_as_bearer(acme: Caller, receiver_for: Callable[..., Receiver]) -> None:
    receiver = receiver_for()
    _run_with_config(acme, url_of(receiver), token=TOKEN)
    drive(deliveries()[0])
    assert receiver.received[0].headers["Authorization"] == f"Bearer {TOKEN}"


def test_no_config_no_push_rows(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    advance(run_id)
    assert deliveries() == []


def test_retry_after_500_then_success(acme: Caller, receiver_for: Callable[..., Receiver]) -> None:
    receiver = receiver_for(behaviour=Behaviour(status=500))
    _run_with_config(acme, url_of(receiver), token=TOKEN)
    row = deliveries()[0]
    delivery_attempt(delivery_pk=row.pk)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_status_code) == (DeliveryStatus.PENDING, 1, 500)
    receiver.behaviour.status = 200
    assert drive(row).status == DeliveryStatus.DELIVERED
    attempts = list(DeliveryAttempt.unscoped_all_tenants.filter(delivery=row).values_list("number", "status_code"))
    assert attempts == [(1, 500), (2, 200)]
    assert len(receiver.received) == 2
    assert receiver.received[0].body == receiver.received[1].body  # the same bytes every attempt


def test_a_3xx_is_a_failed_attempt_and_is_not_followed(
    acme: Caller, receiver_for: Callable[..., Receiver], settings: Any
) -> None:
    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 2
    target = receiver_for("target.test")
    moved = Behaviour(status=307, headers={"Location": url_of(target, "target.test")})
    receiver = receiver_for(behaviour=moved)
    _run_with_config(acme, url_of(receiver), token=TOKEN)
    row = drive(deliveries()[0])
    assert (row.status, row.last_status_code, row.attempts) == (DeliveryStatus.DEAD, 307, 2)
    assert len(receiver.received) == 2
    assert target.received == []


def test_dead_letter_after_max_attempts(acme: Caller, receiver_for: Callable[..., Receiver], settings: Any) -> None:
    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 3
    receiver = receiver_for(behaviour=Behaviour(status=503))
    _run_with_config(acme, url_of(receiver), token=TOKEN)
    row = drive(deliveries()[0])
    assert (row.status, row.attempts, row.max_attempts) == (DeliveryStatus.DEAD, 3, 3)
    assert row.settled_at is not None
    assert DeliveryAttempt.unscoped_all_tenants.filter(delivery=row).count() == 3
    delivery_attempt(delivery_pk=row.pk)  # a late duplicate message changes nothing
    assert len(receiver.received) == 3


def test_network_failure_is_a_failed_attempt(acme: Caller, receiver_for: Callable[..., Receiver]) -> None:
    receiver = receiver_for()
    url = url_of(receiver)
    receiver.server.shutdown()
    receiver.server.server_close()
    _run_with_config(acme, url, token=TOKEN)
    row = deliveries()[0]
    delivery_attempt(delivery_pk=row.pk)
    row.refresh_from_db()
    assert row.status == DeliveryStatus.PENDING and row.last_status_code is None and row.last_error


def test_credentials_never_logged_nor_returned(
    acme: Caller, receiver_for: Callable[..., Receiver], caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 2
    caplog.set_level(logging.DEBUG)
    receiver = receiver_for(behaviour=Behaviour(status=500))
    run_id, config = _run_with_config(acme, url_of(receiver, path="/hook?sig=query-secret"), token=TOKEN)
    for row in deliveries():
        drive(row)
    wire = json_format.MessageToJson(services.push_config_wire(config))
    listed = [
        json_format.MessageToJson(services.push_config_wire(c))
        for c in services.push_config_list(subject=acme.subject, task_id=run_id)
    ]
    for text in [wire, *listed, *(r.getMessage() for r in caplog.records), caplog.text]:
        assert TOKEN not in text
    assert "query-secret" not in caplog.text  # URLs are sanitised before they are logged
    assert receiver.received  # the credential did go where it belongs
    sealed = PushConfig.unscoped_all_tenants.get(pk=config.pk).credentials_sealed
    assert sealed is None or TOKEN.encode() not in bytes(sealed)


def test_the_credential_is_sealed_at_rest(acme: Caller, receiver_for: Callable[..., Receiver]) -> None:
    run_id = acme.create_run("conformance-noop")
    config = push_config_create(subject=acme.subject, task_id=run_id, url=url_of(receiver_for()), token=TOKEN)
    sealed = bytes(PushConfig.unscoped_all_tenants.get(pk=config.pk).credentials_sealed or b"")
    assert sealed and TOKEN.encode() not in sealed


def test_delete_stops_pending_deliveries(acme: Caller, receiver_for: Callable[..., Receiver]) -> None:
    receiver = receiver_for(behaviour=Behaviour(status=500))
    run_id, config = _run_with_config(acme, url_of(receiver), token=TOKEN)
    row = deliveries()[0]
    delivery_attempt(delivery_pk=row.pk)
    push_config_delete(subject=acme.subject, task_id=run_id, config_id=config.config_id)
    delivery_attempt(delivery_pk=row.pk)  # the scheduled retry arrives: nothing is sent
    assert len(receiver.received) == 1 and deliveries() == []


def test_a_claimed_attempt_is_not_doubled_and_the_sweeper_recovers_a_lost_one(
    acme: Caller, receiver_for: Callable[..., Receiver], monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = receiver_for()
    _run_with_config(acme, url_of(receiver), token=TOKEN)
    row = deliveries()[0]
    # A worker claimed the attempt and died before sending: the claim blocks a duplicate message.
    now = timezone.now()
    type(row).unscoped_all_tenants.filter(pk=row.pk).update(
        attempts=1, in_flight_until=now + timedelta(seconds=60), next_attempt_at=now - timedelta(minutes=5)
    )
    delivery_attempt(delivery_pk=row.pk)
    assert receiver.received == []
    sent: list[int] = []
    monkeypatch.setattr(engine, "delivery_enqueue", lambda *, delivery_pk, queue, countdown: sent.append(delivery_pk))
    assert deliveries_sweep() == 0  # the claim is live
    type(row).unscoped_all_tenants.filter(pk=row.pk).update(in_flight_until=now - timedelta(seconds=1))
    assert deliveries_sweep() == 1 and sent == [row.pk]
    # The re-sent message delivers it.
    delivery_attempt(delivery_pk=row.pk)
    row.refresh_from_db()
    assert row.status == DeliveryStatus.DELIVERED and row.attempts == 2 and len(receiver.received) == 1


def test_deliveries_are_enqueued_on_commit_to_the_stored_queue(
    acme: Caller,
    receiver_for: Callable[..., Receiver],
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from apps.push import tasks

    sent: list[tuple[list[int], str, float]] = []
    monkeypatch.setattr(
        tasks.deliver, "apply_async", lambda args, queue, countdown: sent.append((args, queue, countdown))
    )
    run_id = acme.create_run("conformance-noop")
    push_config_create(subject=acme.subject, task_id=run_id, url=url_of(receiver_for()), token=TOKEN)
    with django_capture_on_commit_callbacks(execute=True):
        advance(run_id)
    rows = deliveries()
    assert sent == [([r.pk], settings.OPENWOP_PUSH_QUEUE, 0.0) for r in rows]
    assert {r.queue for r in rows} == {settings.OPENWOP_PUSH_QUEUE} != {settings.CELERY_TASK_DEFAULT_QUEUE}


def test_expired_dead_letters_are_purged(acme: Caller, receiver_for: Callable[..., Receiver], settings: Any) -> None:
    from apps.push.capabilities import DEAD_LETTER_RETENTION_DAYS
    from apps.push.engine import dead_letters_purge

    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 1
    receiver = receiver_for(behaviour=Behaviour(status=500))
    _run_with_config(acme, url_of(receiver), token=TOKEN)
    rows = [drive(row) for row in deliveries()]
    assert {r.status for r in rows} == {DeliveryStatus.DEAD}
    assert dead_letters_purge() == 0
    old = timezone.now() - timedelta(days=DEAD_LETTER_RETENTION_DAYS, seconds=1)
    type(rows[0]).unscoped_all_tenants.filter(pk=rows[0].pk).update(settled_at=old)
    assert dead_letters_purge() >= 1
    assert [r.pk for r in deliveries()] == [r.pk for r in rows[1:]]


def test_attempts_and_the_backlog_are_in_the_metrics(
    acme: Caller, receiver_for: Callable[..., Receiver], settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    """`openwop_push_attempts_total` counts each committed attempt by result (a retry, then the dead
    letter), and the backlog gauges read at scrape time see the pending delivery, then none."""
    from django.test import Client
    from prometheus_client import REGISTRY
    from prometheus_client.parser import text_string_to_metric_families

    def attempts(result: str) -> float:
        return REGISTRY.get_sample_value("openwop_push_attempts_total", {"result": result}) or 0.0

    def backlog() -> dict[str, float]:
        text = Client().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name.startswith("openwop_push_")}  # fmt: skip

    settings.OPENWOP_PUSH_MAX_ATTEMPTS = 2
    receiver = receiver_for(behaviour=Behaviour(status=503))
    _run_with_config(acme, url_of(receiver), token=TOKEN)
    row = deliveries()[0]
    type(row).unscoped_all_tenants.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(seconds=30))
    pending = backlog()
    assert pending["openwop_push_deliveries_pending"] >= 1
    assert pending["openwop_push_oldest_pending_age_seconds"] >= 30
    retry, dead, delivered = attempts("retry"), attempts("dead"), attempts("delivered")
    with django_capture_on_commit_callbacks(execute=True):
        assert drive(row).status == DeliveryStatus.DEAD
    assert (attempts("retry") - retry, attempts("dead") - dead, attempts("delivered") - delivered) == (1, 1, 0)
    settled = backlog()
    assert settled["openwop_push_deliveries_pending"] == pending["openwop_push_deliveries_pending"] - 1
