"""`runs.advance` while the broker refuses connections (issue 32 item 8): the run a door committed
is answered, never an error; the failed send is logged (its class, no URL) and recorded as
`enqueued_at = NULL`, which the sweeper sends at once, and a sweep stops at the first refusal.
The broker here is a real kombu connection to a loopback port nothing listens on."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from apps.runs.engine import run_sweep_stale
from apps.runs.models import Run, RunStatus
from apps.runs.tasks import advance
from openwop_host.celery import app
from tests.live import free_port
from tests.runs.conftest import Caller

NOT_SENT = "runs.advance not sent (OperationalError)"


def _publishers_reset() -> None:
    """Drop the app's connection and producer pools (built from broker_url when first used), as
    Celery does after a fork."""
    app._pool = None
    app.amqp._producer_pool = None


@dataclass
class Broker:
    refused_url: str
    original_url: str
    monkeypatch: pytest.MonkeyPatch
    sent: list[tuple[list[str], str]]

    def back(self) -> None:
        """The broker is reachable again: sends are recorded in `sent` (as `sent_advances` does)."""
        app.conf.broker_url = self.original_url
        _publishers_reset()
        self.monkeypatch.setattr(advance, "apply_async", lambda args, queue: self.sent.append((args, queue)))


@pytest.fixture
def broker_down(sent_advances, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:  # type: ignore[no-untyped-def]
    """This process's Celery publishes for real (not `sent_advances`' record), to a loopback port
    nothing listens on, until `back()`."""
    monkeypatch.delattr(advance, "apply_async")  # the task's own apply_async again
    broker = Broker(f"redis://127.0.0.1:{free_port()}/0", app.conf.broker_url, monkeypatch, sent_advances)
    app.conf.broker_url = broker.refused_url
    _publishers_reset()
    try:
        yield broker
    finally:
        app.conf.broker_url = broker.original_url
        _publishers_reset()


def _not_sent(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if NOT_SENT in r.getMessage()]


def test_a_run_created_while_the_broker_refuses_is_answered_and_marked_unsent(
    acme: Caller, globex: Caller, broker_down: Broker, django_capture_on_commit_callbacks, caplog
) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.WARNING), django_capture_on_commit_callbacks(execute=True):
        run_id = acme.create_run("conformance-delay", {"delayMs": 10})  # 201, not a 500
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    assert (run.status, run.enqueued_at, run.lease_owner) == (RunStatus.PENDING, None, "")
    [record] = _not_sent(caplog)
    assert record.exc_info is None and broker_down.refused_url not in caplog.text  # no traceback, no broker URL
    assert acme.get(f"/runs/{run_id}").json()["status"] == "pending"
    assert globex.get(f"/runs/{run_id}").status_code == 403  # another tenant's, outage or not


def test_the_sweeper_sends_a_run_whose_send_failed_at_once(
    acme: Caller, django_capture_on_commit_callbacks, sent_advances
) -> None:  # type: ignore[no-untyped-def]
    run_id = acme.create_run("conformance-delay", {"delayMs": 10})
    Run.unscoped_all_tenants.filter(run_id=run_id).update(enqueued_at=None)  # as the refused send left it
    with django_capture_on_commit_callbacks(execute=True):
        assert run_sweep_stale() == [run_id]  # not REQUEUE_UNCLAIMED_AFTER later: nothing is out
    assert sent_advances == [([run_id], Run.unscoped_all_tenants.get(run_id=run_id).queue)]
    assert Run.unscoped_all_tenants.get(run_id=run_id).enqueued_at is not None
    assert run_sweep_stale() == []  # sent once


def test_a_sweep_stops_at_the_first_send_the_broker_refuses(
    transactional_db, acme: Caller, broker_down: Broker, caplog
) -> None:  # type: ignore[no-untyped-def]
    """Transactional: each re-enqueue commits (and sends) before the sweep decides the next."""
    run_ids = [acme.create_run("conformance-delay", {"delayMs": 10}) for _ in range(3)]  # each send refused
    unsent = Run.unscoped_all_tenants.filter(run_id__in=run_ids, enqueued_at__isnull=True)
    assert unsent.count() == 3
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert run_sweep_stale() == []
    assert len(_not_sent(caplog)) == 1  # one refusal, not one per run: the next tick tries again
    assert list(Run.unscoped_all_tenants.filter(run_id__in=run_ids).values_list("enqueued_at", flat=True)) == [
        None,
        None,
        None,
    ]


def test_a_replayed_create_whose_send_the_broker_refused_sends_it(
    acme: Caller, broker_down: Broker, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    """REST's retry is the same request under the same Idempotency-Key: it answers the first run
    and, that run never sent, sends it now (as A2A's retry with the same messageId does)."""
    body, key = {"workflowId": "conformance-delay", "inputs": {"delayMs": 10}}, {"Idempotency-Key": "outage-1"}
    with django_capture_on_commit_callbacks(execute=True):
        first = acme.post("/runs", body, **key)
    assert first.status_code == 201
    run_id = first.json()["runId"]
    assert Run.unscoped_all_tenants.get(run_id=run_id).enqueued_at is None
    broker_down.back()
    with django_capture_on_commit_callbacks(execute=True):
        replay = acme.post("/runs", body, **key)
    assert replay.json()["runId"] == run_id
    assert broker_down.sent == [([run_id], Run.unscoped_all_tenants.get(run_id=run_id).queue)]
    with django_capture_on_commit_callbacks(execute=True):
        acme.post("/runs", body, **key)
    assert len(broker_down.sent) == 1  # sent: a further replay sends nothing
