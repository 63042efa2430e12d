"""Every fixture workflow's outcome, driven through the executor in-process (DESIGN.md fixtures)."""

from __future__ import annotations

import pytest

from apps.runs.models import Interrupt, Run, RunStatus
from tests.runs.conftest import Caller, advance, assert_log_contiguous, event_types
from tests.runs.wire_checks import assert_event_doc, assert_snapshot_doc

pytestmark = pytest.mark.django_db


def _poll(caller: Caller, run_id: str) -> dict:
    response = caller.get(f"/runs/{run_id.replace('/', '~2F')}/events/poll?afterSequence=0&timeout=1")
    assert response.status_code == 200, response.content
    body = response.json()
    for doc in body["events"]:
        assert_event_doc(doc)
    return body


def _snapshot(caller: Caller, run_id: str) -> dict:
    response = caller.get(f"/runs/{run_id.replace('/', '~2F')}")
    assert response.status_code == 200, response.content
    assert_snapshot_doc(response.json())
    return response.json()


def test_noop_completes_with_empty_object_outputs(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    run = advance(run_id)
    assert run.status == RunStatus.COMPLETED
    assert event_types(run_id) == ["run.started", "node.started", "node.completed", "run.completed"]
    body = _poll(acme, run_id)
    assert body["isTerminal"] is True and body["status"] == "completed"
    assert body["events"][-1]["payload"] == {"outputs": {}}
    assert body["lastSequence"] == 4
    snapshot = _snapshot(acme, run_id)
    assert snapshot["status"] == "completed" and "completedAt" in snapshot


def test_a_node_event_names_its_node_in_the_payload(acme: Caller) -> None:
    """Every node.* event carries `nodeId` in its payload too (readers find a node's outcome by
    `payload.nodeId`), equal to the event's own; run.* events do not."""
    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    events = _poll(acme, run_id)["events"]
    node_events = [e for e in events if e["type"].startswith("node.")]
    assert [e["type"] for e in node_events] == ["node.started", "node.suspended"]
    for event in node_events:
        assert event["payload"]["nodeId"] == event["nodeId"] != ""
    assert all("nodeId" not in e["payload"] for e in events if e["type"].startswith("run."))


def test_run_started_echoes_the_owner_block_and_transport(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    advance(run_id)
    started = _poll(acme, run_id)["events"][0]
    snapshot = _snapshot(acme, run_id)
    assert started["type"] == "run.started" and started["sequence"] == 1
    assert started["payload"]["transport"] == "rest"
    assert started["payload"]["owner"] == snapshot["owner"]
    assert snapshot["owner"] == {"tenant": "acme", "subject": acme.subject.as_wire()}


def test_failure_fails_with_its_error(acme: Caller) -> None:
    run_id = acme.create_run("conformance-failure")
    run = advance(run_id)
    assert run.status == RunStatus.FAILED
    assert event_types(run_id) == ["run.started", "node.started", "node.failed", "run.failed"]
    error = {"code": "conformance_failure", "message": "This fixture fails by design."}
    assert _poll(acme, run_id)["events"][-1]["payload"] == {"error": error}
    assert _snapshot(acme, run_id)["error"] == error


def test_delay_waits_then_completes(acme: Caller) -> None:
    run_id = acme.create_run("conformance-delay", {"delayMs": 30})
    run = advance(run_id)
    assert run.status == RunStatus.COMPLETED
    events = assert_log_contiguous(run_id)
    started, completed = events[1], events[2]
    assert (started.type, completed.type) == ("node.started", "node.completed")
    assert completed.payload == {"nodeId": completed.node_id, "outputs": {"delayedMs": 30}}
    assert (completed.at - started.at).total_seconds() >= 0.03


def test_delay_input_is_validated_before_any_run_exists(acme: Caller) -> None:
    response = acme.post("/runs", {"workflowId": "conformance-delay", "inputs": {"delayMs": "soon"}})
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "validation_error"
    assert body["details"]["errors"][0]["path"] == "/delayMs"
    assert not Run.unscoped_all_tenants.exists()


def test_cancellable_completes_when_nobody_cancels(acme: Caller) -> None:
    run_id = acme.create_run("conformance-cancellable", {"waitMs": 20})
    assert advance(run_id).status == RunStatus.COMPLETED
    assert event_types(run_id)[-1] == "run.completed"


def test_approval_suspends_then_accept_completes(acme: Caller) -> None:
    run_id = acme.create_run("conformance-approval")
    run = advance(run_id)
    assert run.status == RunStatus.WAITING_APPROVAL
    assert event_types(run_id) == ["run.started", "node.started", "interrupt.requested", "node.suspended"]
    interrupt = Interrupt.unscoped_all_tenants.get(run=run)
    events = _poll(acme, run_id)["events"]
    assert events[3]["payload"]["interruptId"] == interrupt.interrupt_id
    assert events[3]["nodeId"] == "approve"
    assert events[2]["payload"]["kind"] == "approval"
    assert events[2]["payload"]["data"]["actions"] == ["accept", "reject"]
    snapshot = _snapshot(acme, run_id)
    assert snapshot["status"] == "waiting-approval" and snapshot["currentNodeId"] == "approve"
    assert snapshot["interrupt"]["interruptId"] == interrupt.interrupt_id

    response = acme.post(
        f"/runs/{run_id.replace('/', '~2F')}/interrupts/approve",
        {"resumeValue": {"action": "accept", "comment": "fine"}},
    )
    assert response.status_code == 200, response.content
    assert response.json() == {"runId": run_id, "nodeId": "approve", "status": "running"}
    run = advance(run_id)
    assert run.status == RunStatus.COMPLETED
    assert event_types(run_id)[4:] == ["interrupt.resolved", "node.completed", "run.completed"]
    final = _poll(acme, run_id)["events"]
    assert final[4]["payload"] == {
        "nodeId": "approve",
        "interruptId": interrupt.interrupt_id,
        "kind": "approval",
        "resumeValue": {"action": "accept", "comment": "fine"},
    }
    assert final[-1]["payload"] == {"outputs": {"approved": True, "action": "accept", "comment": "fine"}}
    assert_log_contiguous(run_id)


def test_approval_reject_fails_the_run(acme: Caller) -> None:
    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    response = acme.post(
        f"/runs/{run_id.replace('/', '~2F')}/interrupts/approve", {"resumeValue": {"action": "reject"}}
    )
    assert response.status_code == 200
    run = advance(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "approval_rejected"


def test_credential_suspends_with_provider_and_connect_url(acme: Caller) -> None:
    run_id = acme.create_run("conformance-credential")
    run = advance(run_id)
    assert run.status == RunStatus.WAITING_INPUT
    requested = _poll(acme, run_id)["events"][2]
    assert requested["type"] == "interrupt.requested"
    assert requested["payload"]["kind"] == "credential"
    assert requested["payload"]["data"]["provider"] == "conformance"
    assert requested["payload"]["data"]["connectUrl"].startswith("http")
    acme.post(f"/runs/{run_id.replace('/', '~2F')}/interrupts/connect", {"resumeValue": {"action": "accept"}})
    run = advance(run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.outputs == {"provider": "conformance", "connected": True}


def test_echo_outputs_its_inputs(acme: Caller) -> None:
    run_id = acme.create_run("echo", {"message": "hello", "n": 2})
    run = advance(run_id)
    assert run.status == RunStatus.COMPLETED
    assert _poll(acme, run_id)["events"][-1]["payload"] == {"outputs": {"message": "hello", "n": 2}}
