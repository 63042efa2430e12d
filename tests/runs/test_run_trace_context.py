"""interop.md §Trace context on runs: every run has a valid W3C traceparent; a well-formed inbound
one (REST header, A2A `metadata.openwop.traceparent`) is kept, a malformed one is ignored, and
neither ever selects a tenant."""

from __future__ import annotations

import pytest

from apps.runs.models import Run
from apps.runs.services import run_create
from apps.runs.trace_context import trace_id_of, traceparent_child, traceparent_valid
from tests.a2a.conftest import Caller as A2ACaller
from tests.a2a.conftest import immediately, user_message
from tests.door_client import DoorClient
from tests.runs.conftest import Caller

pytestmark = pytest.mark.django_db

PARENT = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"


def test_a_run_without_inbound_context_gets_a_fresh_valid_one(acme: Caller) -> None:
    first = run_create(subject=acme.subject, workflow_id="echo", inputs={}, transport="rest")
    second = run_create(subject=acme.subject, workflow_id="echo", inputs={}, transport="rest")
    assert traceparent_valid(first.traceparent) and traceparent_valid(second.traceparent)
    assert trace_id_of(first.traceparent) != trace_id_of(second.traceparent)
    assert first.tracestate == ""


@pytest.mark.parametrize("bad", ["garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01", PARENT.upper(), ""])
def test_a_malformed_inbound_context_is_ignored(acme: Caller, bad: str) -> None:
    run = run_create(
        subject=acme.subject, workflow_id="echo", inputs={}, transport="rest", traceparent=bad, tracestate="k=v"
    )
    assert traceparent_valid(run.traceparent) and run.traceparent != bad and run.tracestate == ""


def test_rest_takes_the_traceparent_header(acme: Caller) -> None:
    response = acme.post("/runs", {"workflowId": "echo"}, traceparent=PARENT, tracestate="vendor=1")
    assert response.status_code == 201, response.content
    run = Run.unscoped_all_tenants.get(run_id=response.json()["runId"])
    assert (run.traceparent, run.tracestate) == (PARENT, "vendor=1")


def test_a2a_takes_the_in_message_carrier(acme: Caller) -> None:
    a2a = A2ACaller(tenant=acme.tenant, key=acme.key, subject=acme.subject, client=DoorClient())
    message = user_message("trace-1", metadata={"openwop": {"traceparent": PARENT, "tracestate": "a=b"}})
    body = a2a.rpc("SendMessage", immediately(message)).json()
    run = Run.unscoped_all_tenants.get(run_id=body["result"]["task"]["id"])
    assert (run.traceparent, run.tracestate) == (PARENT, "a=b")
    bad = user_message("trace-2", metadata={"openwop": {"traceparent": "00-nope"}})
    body = a2a.rpc("SendMessage", immediately(bad)).json()
    other = Run.unscoped_all_tenants.get(run_id=body["result"]["task"]["id"])
    assert traceparent_valid(other.traceparent) and other.traceparent != PARENT


def test_trace_context_never_selects_the_tenant(acme: Caller, globex: Caller) -> None:
    """Cross-tenant: globex's trace context in acme's request leaves the run in acme."""
    globex_run = run_create(subject=globex.subject, workflow_id="echo", inputs={}, transport="rest")
    response = acme.post("/runs", {"workflowId": "echo"}, traceparent=globex_run.traceparent)
    run = Run.unscoped_all_tenants.get(run_id=response.json()["runId"])
    assert run.run_id.startswith("acme/") and run.tenant_id != globex_run.tenant_id


def test_a_child_keeps_the_trace_and_changes_the_span() -> None:
    child = traceparent_child(PARENT)
    assert traceparent_valid(child) and trace_id_of(child) == trace_id_of(PARENT) and child != PARENT
    assert child.endswith("-01")
