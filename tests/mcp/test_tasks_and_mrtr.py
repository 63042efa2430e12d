"""Tasks extension and MRTR requestState rules, in-process: the engine is driven by hand
(`run_advance`) so every state is reached deterministically, without a worker."""

from __future__ import annotations

import pytest

from apps.core.ids import project_id
from apps.facets.services import facet_update
from apps.mcp.request_state import request_state_mint
from apps.runs.engine import run_advance
from apps.runs.models import Interrupt, Run, RunEvent
from apps.runs.services import run_create
from tests.mcp.conftest import TASKS, McpCaller

pytestmark = pytest.mark.django_db

WITH_TASKS = {"elicitation": {"form": {}, "url": {}}, "extensions": {TASKS: {}}}


@pytest.fixture(autouse=True)
def _no_task_grace(monkeypatch, settings) -> None:  # type: ignore[no-untyped-def]
    # No worker runs here, so no run ends by itself: waiting out the grace would only cost time.
    monkeypatch.setattr("apps.mcp.tools.TASK_GRACE_SECONDS", 0.0)
    # Nor does the request advance it (inline advance: test_inline_answers.py): every state below
    # is reached by hand.
    settings.OPENWOP_INLINE_MAX_NODES = 0


def _advance(run_id: str) -> Run:
    run_advance(run_id=run_id, worker="test-worker")
    return Run.unscoped_all_tenants.get(run_id=run_id)


def _log_length(run_id: str) -> int:
    return RunEvent.unscoped_all_tenants.filter(run__run_id=run_id).count()


def _task(caller: McpCaller, name: str, arguments: dict | None = None) -> dict:
    response = caller.call("tools/call", {"name": name, "arguments": arguments or {}}, capabilities=WITH_TASKS)
    assert response.status_code == 200, response.content
    return response.json()["result"]


def test_approval_as_a_task_get_update_complete(acme: McpCaller) -> None:
    created = _task(acme, "conformance-approval")
    assert created["resultType"] == "task" and created["status"] == "working"
    task_id = created["taskId"]
    run_id = created["_meta"]["dev.openwop/runId"]
    assert task_id == project_id(run_id) and "~2F" in task_id and len(task_id.split("~2F")[1]) >= 22
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    assert run.transport == "mcp"
    assert RunEvent.unscoped_all_tenants.get(run=run, sequence=1).payload["transport"] == "mcp"

    assert _advance(run_id).status == "waiting-approval"
    before = _log_length(run_id)
    got = acme.call("tasks/get", {"taskId": task_id}, capabilities=WITH_TASKS).json()["result"]
    assert _log_length(run_id) == before  # tasks/get appends nothing
    assert got["resultType"] == "complete" and got["status"] == "input_required"
    interrupt = Interrupt.unscoped_all_tenants.get(run=run)
    [(key, request)] = got["inputRequests"].items()
    assert key == interrupt.interrupt_id and key != interrupt.node_id  # keyed by interruptId
    assert request["method"] == "elicitation/create" and request["params"]["mode"] == "form"
    schema = request["params"]["requestedSchema"]
    assert schema["properties"]["action"]["enum"] == ["accept", "reject"]
    assert schema["properties"]["comment"]["type"] == "string"

    answer = {key: {"action": "accept", "content": {"action": "accept", "comment": "ship it"}}}
    ack = acme.call("tasks/update", {"taskId": task_id, "inputResponses": answer}, capabilities=WITH_TASKS)
    assert ack.json()["result"]["resultType"] == "complete"
    # a repeat resolves nothing and is still an empty result, not an error
    again = acme.call("tasks/update", {"taskId": task_id, "inputResponses": answer}, capabilities=WITH_TASKS)
    assert again.status_code == 200 and "error" not in again.json()
    assert Interrupt.unscoped_all_tenants.get(pk=interrupt.pk).resolution == {"action": "accept", "comment": "ship it"}
    assert RunEvent.unscoped_all_tenants.filter(run=run, type="interrupt.resolved").count() == 1

    assert _advance(run_id).status == "completed"
    done = acme.call("tasks/get", {"taskId": task_id}, capabilities=WITH_TASKS).json()["result"]
    assert done["status"] == "completed" and done["result"]["isError"] is False
    assert done["result"]["structuredContent"]["approved"] is True

    # tasks/cancel on a finished run: acknowledged, nothing appended
    length = _log_length(run_id)
    cancel = acme.call("tasks/cancel", {"taskId": task_id}, capabilities=WITH_TASKS)
    assert cancel.json()["result"]["resultType"] == "complete" and _log_length(run_id) == length


def test_failed_run_is_a_completed_task_with_a_tool_error(acme: McpCaller) -> None:
    created = _task(acme, "conformance-failure")
    _advance(created["_meta"]["dev.openwop/runId"])
    got = acme.call("tasks/get", {"taskId": created["taskId"]}, capabilities=WITH_TASKS).json()["result"]
    assert got["status"] == "completed" and got["result"]["isError"] is True
    assert got["result"]["structuredContent"]["error"]["code"] == "conformance_failure"


def test_tasks_cancel_cancels_the_run(acme: McpCaller) -> None:
    created = _task(acme, "conformance-cancellable", {"waitMs": 60000})
    ack = acme.call("tasks/cancel", {"taskId": created["taskId"]}, capabilities=WITH_TASKS)
    assert ack.status_code == 200 and ack.json()["result"]["resultType"] == "complete"
    got = acme.call("tasks/get", {"taskId": created["taskId"]}, capabilities=WITH_TASKS).json()["result"]
    assert got["status"] == "cancelled" and "result" not in got


def test_tasks_methods_need_the_extension_declared(acme: McpCaller) -> None:
    created = _task(acme, "echo")
    for method in ("tasks/get", "tasks/cancel"):
        response = acme.call(method, {"taskId": created["taskId"]})
        assert response.status_code == 400 and response.json()["error"]["code"] == -32021
        assert response.json()["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}


def test_unknown_foreign_and_malformed_task_ids_are_byte_identical(acme: McpCaller, globex: McpCaller) -> None:
    foreign = _task(globex, "conformance-cancellable")["taskId"]
    unknown = "acme~2F" + "A" * 26
    answers = set()
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        for task_id in (foreign, unknown, "acme~ZZbroken", "globex~2F" + "B" * 26, "no-slash-at-all"):
            params = {"taskId": task_id, "inputResponses": {}}
            response = acme.call(method, params, capabilities=WITH_TASKS, id=99)
            answers.add((response.status_code, response.content))
    assert len(answers) == 1, answers
    [(status, content)] = answers
    assert status == 400 and b'"code":-32602' in content and b"globex" not in content
    # the foreign task is untouched
    assert Run.unscoped_all_tenants.get(run_id=foreign.replace("~2F", "/")).status == "pending"


def _suspended_approval(caller: McpCaller) -> tuple[Run, Interrupt]:
    run = run_create(subject=caller.subject, workflow_id="conformance-approval", inputs={}, transport="mcp")
    run = _advance(run.run_id)
    return run, Interrupt.unscoped_all_tenants.get(run=run)


def _retry(caller: McpCaller, state: str, arguments: dict | None = None, responses: dict | None = None, **kw):  # type: ignore[no-untyped-def]
    params: dict = {"name": "conformance-approval", "arguments": arguments or {}, "requestState": state}
    if responses is not None:
        params["inputResponses"] = responses
    return caller.call("tools/call", params, **kw)


def test_request_state_is_single_use_and_forgery_fails_alike(acme: McpCaller) -> None:
    run, interrupt = _suspended_approval(acme)
    state = request_state_mint(
        subject=acme.subject,
        tool="conformance-approval",
        arguments={},
        run_id=run.run_id,
        interrupt_ids=[interrupt.interrupt_id],
        round=1,
    )
    # no answer: a fresh InputRequiredResult for the next round, with a new state
    first = _retry(acme, state).json()["result"]
    assert first["resultType"] == "input_required" and first["requestState"] != state
    assert list(first["inputRequests"]) == [interrupt.interrupt_id]
    replay = _retry(acme, state)
    body, mac = state.split(".")
    forged = _retry(acme, f"{body}.{'A' * len(mac)}")
    tampered = _retry(acme, f"{body[:-2]}xx.{mac}")
    garbage = _retry(acme, "not-a-state")
    errors = [r.json()["error"] for r in (replay, forged, tampered, garbage)]
    assert all(r.status_code == 400 for r in (replay, forged, tampered, garbage))
    assert errors == [{"code": -32602, "message": "Invalid or expired requestState"}] * 4
    assert Interrupt.unscoped_all_tenants.get(pk=interrupt.pk).resolved_at is None


def test_request_state_is_bound_to_caller_and_request(acme: McpCaller, mcp_caller_for) -> None:  # type: ignore[no-untyped-def]
    run, interrupt = _suspended_approval(acme)

    def mint() -> str:
        return request_state_mint(
            subject=acme.subject,
            tool="conformance-approval",
            arguments={},
            run_id=run.run_id,
            interrupt_ids=[interrupt.interrupt_id],
            round=1,
        )

    colleague = mcp_caller_for("acme")  # same tenant, another principal
    assert _retry(colleague, mint()).json()["error"]["code"] == -32602
    assert _retry(acme, mint(), arguments={"other": True}).json()["error"]["code"] == -32602
    other_tool = acme.call("tools/call", {"name": "echo", "arguments": {}, "requestState": mint()})
    assert other_tool.json()["error"]["code"] == -32602


def test_round_ceiling_refuses_the_round_beyond_max_rounds(acme: McpCaller) -> None:
    facet_update(protocol="mcp", changes={"mrtr_max_rounds": 2}, actor="test")
    run, interrupt = _suspended_approval(acme)
    state = request_state_mint(
        subject=acme.subject,
        tool="conformance-approval",
        arguments={},
        run_id=run.run_id,
        interrupt_ids=[interrupt.interrupt_id],
        round=1,
    )
    second = _retry(acme, state).json()["result"]
    assert second["resultType"] == "input_required"
    refused = _retry(acme, second["requestState"])
    error = refused.json()["error"]
    assert error["code"] == -32602 and error["data"] == {"reason": "mcp_mrtr_rounds_exceeded", "maxRounds": 2}
