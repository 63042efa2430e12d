"""`conformance-approval-approvers`: an approval gate only `urn:conformance:listed-approver` may
resolve (interrupt.md §Approver enforcement). Anyone else is refused on every door and the gate
stays open: REST answers 403 forbidden, MCP tasks/update is acknowledged and resolves nothing, an
A2A message is -32602. The listed principal resolves it."""

from __future__ import annotations

import json

import pytest

from apps.runs.engine import run_advance
from apps.runs.models import Interrupt, Run, RunEvent
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.services import api_key_create
from tests.door_client import DoorClient
from tests.mcp.conftest import McpCaller

pytestmark = pytest.mark.django_db

FIXTURE = "conformance-approval-approvers"
LISTED = "urn:conformance:listed-approver"
TASKS = {"elicitation": {"form": {}, "url": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}}


def _waiting_run(key: str) -> Run:
    created = DoorClient().post(
        "/runs", data=json.dumps({"workflowId": FIXTURE}), content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )  # fmt: skip
    assert created.status_code == 201, created.content
    run_advance(run_id=created.json()["runId"], worker="test-worker")
    run = Run.unscoped_all_tenants.get(run_id=created.json()["runId"])
    assert run.status == "waiting-approval"
    return run


def _resolve(key: str, run: Run) -> object:
    return DoorClient().post(
        f"/runs/{run.run_id.replace('/', '~2F')}/interrupts/gate",
        data=json.dumps({"resumeValue": {"action": "accept"}}), content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )  # fmt: skip


def _listed_key(slug: str) -> str:
    """A key whose Subject is the listed approver (its subjectId is the principal the list names)."""
    api_key, raw = api_key_create(tenant=Tenant.objects.get(slug=slug), label="listed approver")
    ApiKey.objects.for_tenant(api_key.tenant_id).filter(pk=api_key.pk).update(subject_id=LISTED)
    return raw


def test_a_resolver_outside_the_list_is_refused_on_rest_and_the_gate_stays_open(acme: McpCaller) -> None:
    run = _waiting_run(acme.key)
    refused = _resolve(acme.key, run)
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"  # type: ignore[attr-defined]
    run.refresh_from_db()
    assert run.status == "waiting-approval"
    assert Interrupt.unscoped_all_tenants.get(run=run).resolved_at is None
    assert not RunEvent.unscoped_all_tenants.filter(run=run, type="interrupt.resolved").exists()


def test_the_listed_approver_resolves(acme: McpCaller) -> None:
    run = _waiting_run(acme.key)
    resolved = _resolve(_listed_key("acme"), run)
    assert resolved.status_code == 200, resolved.content  # type: ignore[attr-defined]
    assert Interrupt.unscoped_all_tenants.get(run=run).resolution == {"action": "accept"}


def test_another_tenants_approver_of_the_same_name_cannot_reach_the_gate(acme: McpCaller, globex: McpCaller) -> None:
    run = _waiting_run(acme.key)
    foreign = _resolve(_listed_key("globex"), run)
    assert foreign.status_code == 403 and foreign.json()["error"] == "id_tenant_mismatch"  # type: ignore[attr-defined]
    assert Interrupt.unscoped_all_tenants.get(run=run).resolved_at is None


def test_mcp_tasks_update_from_a_non_approver_resolves_nothing(
    acme: McpCaller, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("apps.mcp.tools.TASK_GRACE_SECONDS", 0.0)
    created = acme.call("tools/call", {"name": FIXTURE, "arguments": {}}, capabilities=TASKS).json()["result"]
    run_id, task_id = created["_meta"]["dev.openwop/runId"], created["taskId"]
    run_advance(run_id=run_id, worker="test-worker")
    got = acme.call("tasks/get", {"taskId": task_id}, capabilities=TASKS).json()["result"]
    assert got["status"] == "input_required"
    [key] = got["inputRequests"]
    answer = {key: {"action": "accept", "content": {"action": "accept"}}}
    ack = acme.call("tasks/update", {"taskId": task_id, "inputResponses": answer}, capabilities=TASKS)
    assert ack.status_code == 200 and ack.json()["result"]["resultType"] == "complete"  # acknowledged, no error
    assert Interrupt.unscoped_all_tenants.get(interrupt_id=key).resolved_at is None
    again = acme.call("tasks/get", {"taskId": task_id}, capabilities=TASKS).json()["result"]
    assert again["status"] == "input_required"


def test_an_a2a_message_from_a_non_approver_is_refused(acme: McpCaller) -> None:
    run = _waiting_run(acme.key)
    body = {
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {
            "messageId": "approve-it", "role": "ROLE_USER", "taskId": run.run_id, "parts": [{"text": "ok"}],
            "metadata": {"openwop": {"interrupt": {"action": "accept"}}},
        }},
    }  # fmt: skip
    answer = DoorClient().post(
        "/a2a/jsonrpc", data=json.dumps(body), content_type="application/json",
        headers={"Authorization": f"Bearer {acme.key}", "A2A-Version": "1.0"},
    ).json()  # fmt: skip
    assert answer["error"]["code"] == -32602
    assert Interrupt.unscoped_all_tenants.get(run=run).resolved_at is None
