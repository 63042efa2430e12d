"""Several input requests at once (SEP-2322 multiple inputRequests; SEP-2663 partial fulfillment):
a parallel node's branches are asked in one InputRequiredResult, answered together by an MRTR
retry, or one by one through tasks/update, the task staying input_required until the last one.
In-process; the runs settle in the request (inline advance), no worker."""

from __future__ import annotations

from typing import Any

import pytest

from apps.runs.models import Interrupt, Run, RunStatus
from tests.mcp.conftest import TASKS, McpCaller

pytestmark = pytest.mark.django_db

EVERYTHING = {"elicitation": {"form": {}}, "sampling": {}, "roots": {}}
WITH_TASKS = {"elicitation": {"form": {}}, "extensions": {TASKS: {}}}


@pytest.fixture(autouse=True)
def _no_task_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("apps.mcp.tools.TASK_GRACE_SECONDS", 0.0)


def _call(caller: McpCaller, params: dict[str, Any], capabilities: dict[str, Any]) -> dict[str, Any]:
    response = caller.call("tools/call", params, capabilities=capabilities)
    assert response.status_code == 200, response.content
    body = response.json()
    assert "error" not in body, body
    return body["result"]


def _answer(method: str) -> dict[str, Any]:
    if method == "elicitation/create":
        return {"action": "accept", "content": {"name": "Alice"}}
    if method == "sampling/createMessage":
        return {"role": "assistant", "content": {"type": "text", "text": "Hello there!"}, "model": "m"}
    return {"roots": [{"uri": "file:///work", "name": "work"}]}


def test_three_kinds_asked_in_one_round_and_answered_in_one_retry(acme: McpCaller) -> None:
    tool = {"name": "test_input_required_result_multiple_inputs", "arguments": {}}
    first = _call(acme, tool, EVERYTHING)
    assert first["resultType"] == "input_required" and first["requestState"]
    requests = first["inputRequests"]
    assert sorted(r["method"] for r in requests.values()) == [
        "elicitation/create",
        "roots/list",
        "sampling/createMessage",
    ]
    run = Run.unscoped_all_tenants.get(run_id=first["_meta"]["dev.openwop/runId"])
    open_ids = set(
        Interrupt.unscoped_all_tenants.filter(run=run, resolved_at__isnull=True).values_list("interrupt_id", flat=True)
    )
    assert set(requests) == open_ids and len(open_ids) == 3  # keyed by interruptId, all open at once

    # Answering two of the three leaves the run waiting and asks again for the third only.
    partial = {k: _answer(r["method"]) for k, r in requests.items() if r["method"] != "roots/list"}
    second = _call(acme, {**tool, "inputResponses": partial, "requestState": first["requestState"]}, EVERYTHING)
    assert second["resultType"] == "input_required"
    assert [r["method"] for r in second["inputRequests"].values()] == ["roots/list"]

    rest = {k: _answer(r["method"]) for k, r in second["inputRequests"].items()}
    done = _call(acme, {**tool, "inputResponses": rest, "requestState": second["requestState"]}, EVERYTHING)
    assert done["resultType"] == "complete" and done["isError"] is False
    outputs = done["structuredContent"]
    assert outputs["user_name"]["answers"] == {"name": "Alice"}
    assert "Hello there!" in str(outputs["greeting"])
    assert "file:///work" in str(outputs["client_roots"])


def test_a_client_without_one_capability_is_refused_before_any_run(acme: McpCaller) -> None:
    response = acme.call(
        "tools/call",
        {"name": "test_input_required_result_multiple_inputs", "arguments": {}},
        capabilities={"elicitation": {"form": {}}, "sampling": {}},  # no roots
    )
    assert response.json()["error"]["code"] == -32021
    assert not Run.unscoped_all_tenants.filter(
        workflow__workflow_id="test_input_required_result_multiple_inputs"
    ).exists()


def test_tasks_update_partial_fulfilment(acme: McpCaller) -> None:
    created = _call(acme, {"name": "multi_input", "arguments": {}}, WITH_TASKS)
    assert created["resultType"] == "task" and created["status"] == "input_required"
    task = {"taskId": created["taskId"]}
    got = acme.call("tasks/get", task, capabilities=WITH_TASKS).json()["result"]
    keys = list(got["inputRequests"])
    assert len(keys) == 2

    first = {keys[0]: {"action": "accept", "content": {"name": "one"}}}
    ack = acme.call("tasks/update", {**task, "inputResponses": first}, capabilities=WITH_TASKS).json()["result"]
    assert ack["resultType"] == "complete"
    got = acme.call("tasks/get", task, capabilities=WITH_TASKS).json()["result"]
    assert got["status"] == "input_required" and list(got["inputRequests"]) == [keys[1]]  # the answered key is gone

    second = {keys[1]: {"action": "accept", "content": {"name": "two"}}, "not-a-key": {"action": "accept"}}
    acme.call("tasks/update", {**task, "inputResponses": second}, capabilities=WITH_TASKS)
    run = Run.unscoped_all_tenants.get(run_id=created["_meta"]["dev.openwop/runId"])
    assert run.status == RunStatus.RUNNING  # no inline resume on tasks/update: a worker continues it
    from apps.runs.engine import run_advance

    run_advance(run_id=run.run_id, worker="test-worker")
    done = acme.call("tasks/get", task, capabilities=WITH_TASKS).json()["result"]
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == {
        "first": {"answers": {"name": "one"}},
        "second": {"answers": {"name": "two"}},
    }


def test_another_tenant_cannot_answer_a_branch(acme: McpCaller, globex: McpCaller) -> None:
    created = _call(acme, {"name": "multi_input", "arguments": {}}, WITH_TASKS)
    got = acme.call("tasks/get", {"taskId": created["taskId"]}, capabilities=WITH_TASKS).json()["result"]
    answers = {k: {"action": "accept", "content": {"name": "x"}} for k in got["inputRequests"]}
    foreign = globex.call(
        "tasks/update", {"taskId": created["taskId"], "inputResponses": answers}, capabilities=WITH_TASKS
    )
    assert foreign.json()["error"]["code"] == -32602  # an unknown task, as for any id it cannot read
    run = Run.unscoped_all_tenants.get(run_id=created["_meta"]["dev.openwop/runId"])
    assert Interrupt.unscoped_all_tenants.filter(run=run, resolved_at__isnull=True).count() == 2


def test_a_gather_first_tool_asks_by_mrtr_then_becomes_a_task(acme: McpCaller) -> None:
    tool = {"name": "test_tool_with_task", "arguments": {}}
    first = _call(acme, tool, WITH_TASKS)
    assert first["resultType"] == "input_required" and "taskId" not in first  # no task before the answer
    [key] = first["inputRequests"]
    answer = {key: {"action": "accept", "content": {"name": "Alice"}}}
    second = _call(acme, {**tool, "inputResponses": answer, "requestState": first["requestState"]}, WITH_TASKS)
    assert second["resultType"] == "task" and "requestState" not in second
    assert second["status"] == "working"
    from tests.runs.conftest import advance_through_waits

    advance_through_waits(second["_meta"]["dev.openwop/runId"])  # its delay parks the run, then it completes
    done = acme.call("tasks/get", {"taskId": second["taskId"]}, capabilities=WITH_TASKS).json()["result"]
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == {"text": "Hello, Alice!"}


def test_without_tasks_the_same_tool_is_refused(acme: McpCaller) -> None:
    response = acme.call("tools/call", {"name": "test_tool_with_task", "arguments": {}}, capabilities=EVERYTHING)
    assert response.json()["error"]["code"] == -32021
