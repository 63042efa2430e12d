"""cancelRun (runs.md §Cancel): at once when no worker holds the run (pending, waiting, parked on
the clock), via `cancelling` when a worker runs the node, 409 run_terminal on a finished run."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection

from apps.runs import nodes
from apps.runs.models import Run, RunStatus
from tests.envelope import assert_envelope
from tests.runs.conftest import Caller, advance, assert_log_contiguous, event_types


def _cancel(caller: Caller, run_id: str, body: dict | None = None):  # type: ignore[no-untyped-def]
    return caller.post(f"/runs/{run_id.replace('/', '~2F')}/cancel", body)


@pytest.mark.django_db
def test_cancel_a_pending_run_cancels_it_at_once(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    response = _cancel(acme, run_id, {"reason": "changed my mind"})
    assert response.status_code == 200
    assert response.json() == {"runId": run_id, "status": "cancelled"}
    assert event_types(run_id) == ["run.started", "run.cancelled"]
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    cancelled = run.events.get(type="run.cancelled")
    assert cancelled.payload["reason"] == "changed my mind"
    assert cancelled.payload["cancelledBy"] == acme.subject.subject_id
    # A worker arriving later finds nothing to do.
    assert advance(run_id).status == RunStatus.CANCELLED
    assert len(assert_log_contiguous(run_id)) == 2


@pytest.mark.django_db
def test_cancel_a_waiting_run_cancels_its_suspended_node(acme: Caller) -> None:
    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    assert _cancel(acme, run_id).json()["status"] == "cancelled"
    assert event_types(run_id)[-2:] == ["node.cancelled", "run.cancelled"]
    # Its interrupt can no longer be resolved.
    response = acme.post(
        f"/runs/{run_id.replace('/', '~2F')}/interrupts/approve", {"resumeValue": {"action": "accept"}}
    )
    assert_envelope(response, "interrupt_already_resolved", 409)


@pytest.mark.django_db
@pytest.mark.parametrize("workflow_id", ["conformance-noop", "conformance-failure"])
def test_cancel_a_finished_run_is_run_terminal(acme: Caller, workflow_id: str) -> None:
    run_id = acme.create_run(workflow_id)
    status = advance(run_id).status
    before = event_types(run_id)
    body = assert_envelope(_cancel(acme, run_id), "run_terminal", 409)
    assert body["details"] == {"runStatus": status}
    assert event_types(run_id) == before


@pytest.mark.django_db
def test_cancel_twice_is_run_terminal_the_second_time(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    assert _cancel(acme, run_id).status_code == 200
    assert_envelope(_cancel(acme, run_id), "run_terminal", 409)


@pytest.mark.django_db
def test_cancel_body_is_closed(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    assert_envelope(_cancel(acme, run_id, {"why": "x"}), "validation_error", 400)


@pytest.mark.django_db
def test_cancel_a_parked_run_ends_it_at_once_with_the_events_a_worker_wrote(acme: Caller, sent_advances) -> None:
    """A run waiting on the clock holds no worker: the cancel itself ends its node and the run,
    with the events a worker watching the cancel wrote (node.cancelled, run.cancelled)."""
    run_id = acme.create_run("conformance-cancellable", {"waitMs": 60_000})
    parked = advance(run_id)
    assert (parked.status, parked.current_node_id, parked.lease_owner) == (RunStatus.RUNNING, "wait", "")
    sent_advances.clear()
    response = _cancel(acme, run_id, {"reason": "stop"})
    assert response.status_code == 200
    assert response.json() == {"runId": run_id, "status": "cancelled"}
    assert sent_advances == []  # no worker needed
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    assert (run.status, run.lease_owner, run.current_node_id) == (RunStatus.CANCELLED, "", "")
    assert event_types(run_id) == ["run.started", "node.started", "node.cancelled", "run.cancelled"]
    assert run.events.get(type="run.cancelled").payload["reason"] == "stop"
    # The parking worker's wake-up arrives later and finds nothing to do.
    assert advance(run_id).status == RunStatus.CANCELLED
    assert_log_contiguous(run_id)


@pytest.mark.django_db(transaction=True)
def test_cancel_a_running_run_goes_through_cancelling(acme: Caller, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A worker thread is inside the cancellable node (its wait slept, as its last moments are);
    the cancel lands as `cancelling` and the worker ends the run `cancelled` within its ~100 ms poll."""
    monkeypatch.setattr(nodes, "SLEEP_BELOW", timedelta(minutes=5))  # the whole wait is slept
    run_id = acme.create_run("conformance-cancellable", {"waitMs": 60_000})

    def work() -> None:
        try:
            advance(run_id, worker="thread-worker")
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    deadline = time.monotonic() + 30
    while Run.unscoped_all_tenants.get(run_id=run_id).status != RunStatus.RUNNING:
        assert time.monotonic() < deadline, "the worker never started the node"
        time.sleep(0.02)
    response = _cancel(acme, run_id, {"reason": "stop"})
    assert response.status_code == 200
    assert response.json()["status"] == "cancelling"
    worker.join(timeout=30)
    assert not worker.is_alive()
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    assert run.status == RunStatus.CANCELLED
    assert run.lease_owner == ""
    assert event_types(run_id) == ["run.started", "node.started", "node.cancelled", "run.cancelled"]
    assert run.events.get(type="run.cancelled").payload["reason"] == "stop"
    assert_log_contiguous(run_id)
