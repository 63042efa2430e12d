"""tools/call settles its run in the request (run_create(inline=True)), in-process with no
worker: a quick tool is answered directly even with no task grace at all, which is what makes the
tasks shortcut independent of the broker's latency; a tool that waits becomes a task at once."""

from __future__ import annotations

import pytest

from apps.runs.models import Run, RunEvent
from tests.mcp.conftest import TASKS, McpCaller

pytestmark = pytest.mark.django_db

WITH_TASKS = {"elicitation": {"form": {}, "url": {}}, "extensions": {TASKS: {}}}


@pytest.fixture(autouse=True)
def _no_task_grace(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("apps.mcp.tools.TASK_GRACE_SECONDS", 0.0)


def _result(caller: McpCaller, name: str, arguments: dict, capabilities: dict) -> dict:
    response = caller.call("tools/call", {"name": name, "arguments": arguments}, capabilities=capabilities)
    assert response.status_code == 200, response.content
    return response.json()["result"]


def test_a_quick_tool_is_answered_directly_with_no_worker(acme: McpCaller) -> None:
    result = _result(acme, "greet", {"name": "World"}, WITH_TASKS)
    assert result["resultType"] == "complete" and result["structuredContent"] == {"text": "Hello, World!"}
    run = Run.unscoped_all_tenants.get(workflow__workflow_id="greet")
    assert run.status == "completed" and run.lease_owner == ""


def test_an_approval_is_already_asked_for_when_the_task_is_created(acme: McpCaller) -> None:
    created = _result(acme, "conformance-approval", {}, WITH_TASKS)
    assert created["resultType"] == "task" and created["status"] == "input_required"


def test_a_tool_that_waits_is_a_task_and_left_to_a_worker(acme: McpCaller) -> None:
    created = _result(acme, "conformance-delay", {"delayMs": 60000}, WITH_TASKS)
    assert created["resultType"] == "task" and created["status"] == "working"
    run = Run.unscoped_all_tenants.get(run_id=created["_meta"]["dev.openwop/runId"])
    assert run.lease_owner == "" and not RunEvent.unscoped_all_tenants.filter(run=run, type="node.started").exists()
