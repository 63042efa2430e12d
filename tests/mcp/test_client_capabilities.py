"""What a tool needs of its client, checked before any run exists; and what the client gives back.

Live uvicorn and Celery on loopback, the `mcp` SDK client (which declares a capability exactly when
a callback for it is given, and mirrors `x-mcp-header` parameters on its own), and raw httpx for
what the SDK will not send (no capability, a header that contradicts the body).
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from mcp.shared.exceptions import MCPError

from apps.runs.models import Run
from tests.mcp.conftest import TASKS, routing_headers, rpc
from tests.mcp.sdk_client import TasksExtension, mcp_client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def key(live_url: str, live_worker, make_key) -> str:  # type: ignore[no-untyped-def]
    return make_key("acme")


def _post(live_url: str, key: str, body: dict[str, Any], extra: dict[str, str] | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", **routing_headers(body), **(extra or {})}
    return httpx.post(f"{live_url}/mcp", json=body, headers=headers, timeout=30)


def _runs_of(workflow_id: str) -> int:
    try:
        return Run.unscoped_all_tenants.filter(workflow__workflow_id=workflow_id).count()
    finally:
        connection.close()


async def _sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    [message] = params.messages
    assert message.content.type == "text"  # type: ignore[union-attr]
    answer = "Paris" if "France" in message.content.text else "Hello."  # type: ignore[union-attr]
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text=answer), model="test-model"
    )


async def _roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///work/a", name="a"), types.Root(uri="file:///work/b")])


def test_a_sampling_tool_without_declared_sampling_is_refused_before_any_run(live_url: str, key: str) -> None:
    before = _runs_of("test_missing_capability")
    body = rpc("tools/call", {"name": "test_missing_capability", "arguments": {}}, capabilities={})
    response = _post(live_url, key, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32021
    assert error["data"] == {"requiredCapabilities": {"sampling": {}}}
    assert _runs_of("test_missing_capability") == before  # refused before any run exists


async def test_sampling_and_roots_go_to_the_client_and_come_back(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key, sampling_callback=_sample, list_roots_callback=_roots) as client:
        sampled = await client.call_tool("test_input_required_result_sampling", {})
        assert sampled.is_error is False
        assert sampled.structured_content == {"text": "Paris", "model": "test-model"}
        assert sampled.content[0].text == "Paris"  # type: ignore[union-attr]
        roots = await client.call_tool("test_input_required_result_list_roots", {})
        assert roots.is_error is False
        assert [r["uri"] for r in roots.structured_content["roots"]] == ["file:///work/a", "file:///work/b"]  # type: ignore[index]
        # The first round is an InputRequiredResult naming the client request, keyed by interruptId.
        first = await client.session.call_tool("test_input_required_result_sampling", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        [(interrupt_id, request)] = first.input_requests.items()  # type: ignore[union-attr]
        assert interrupt_id.startswith("acme/") and isinstance(request, types.CreateMessageRequest)
        assert request.params.max_tokens == 100


async def test_a_task_only_tool_needs_the_tasks_extension(live_url: str, key: str) -> None:
    body = rpc("tools/call", {"name": "failing_job", "arguments": {}}, capabilities={})
    refused = await sync_to_async(_post)(live_url, key, body)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == -32021
    assert refused.json()["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}

    async with mcp_client(live_url, key, extensions=[TasksExtension()]) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["failing_job"].execution.task_support == "required"  # type: ignore[union-attr]
        assert tools["echo"].execution.task_support == "optional"  # type: ignore[union-attr]
        result = await client.call_tool("failing_job", {})
        assert result.is_error is True and "job_failed" in result.content[0].text  # type: ignore[union-attr]


async def test_a_host_fault_is_a_failed_task_with_a_json_rpc_error(live_url: str, key: str) -> None:
    tasks = TasksExtension()
    async with mcp_client(live_url, key, extensions=[tasks]) as client:
        await client.call_tool("protocol_error_job", {})
        final = tasks.seen[-1]
        assert final.status == "failed" and final.result is None
        body = rpc("tasks/get", {"taskId": final.task_id}, capabilities={"extensions": {TASKS: {}}})
        state = (await sync_to_async(_post)(live_url, key, body)).json()["result"]
        assert state["status"] == "failed" and "result" not in state
        assert state["error"] == {"code": -32603, "message": "Internal error"}
        # A workflow's own failure stays a completed task whose result is a tool error.
        await client.call_tool("failing_job", {})
        assert tasks.seen[-1].status == "completed" and tasks.seen[-1].result["isError"] is True  # type: ignore[index]


def test_header_parameters_must_mirror_the_arguments(live_url: str, key: str) -> None:
    arguments = {"region": "eu west", "priority": 3}
    body = rpc("tools/call", {"name": "test_header_params", "arguments": arguments})
    good = {"Mcp-Param-Region": "eu west", "Mcp-Param-Priority": "3"}
    ok = _post(live_url, key, body, good)
    assert ok.status_code == 200 and ok.json()["result"]["content"][0]["text"] == "Routed to eu west."
    wrapped = "=?base64?" + base64.b64encode(b"eu west").decode() + "?="
    assert _post(live_url, key, body, {**good, "Mcp-Param-Region": wrapped}).status_code == 200
    for headers in (
        {"Mcp-Param-Priority": "3"},  # the region header is missing while the body carries it
        {**good, "Mcp-Param-Region": "us-east"},  # contradicts the body
        {**good, "Mcp-Param-Region": "=?base64?ZXUgd2VzdA?="},  # bad padding
        {**good, "Mcp-Param-Region": "=?base64?ZXUgd2Vzd*==?="},  # not the base64 alphabet
    ):
        refused = _post(live_url, key, body, headers)
        assert refused.status_code == 400, headers
        assert refused.json()["error"]["code"] == -32020, headers
    # A tool without annotated parameters ignores stray Mcp-Param headers it never declared.
    echo = rpc("tools/call", {"name": "echo", "arguments": {"a": 1}})
    assert _post(live_url, key, echo, {"Mcp-Param-Region": "x"}).status_code == 200


async def test_the_sdk_mirrors_header_parameters_and_a_text_output_is_the_text(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key) as client:
        await client.list_tools()  # the SDK learns which parameters it mirrors from the listing
        routed = await client.call_tool("test_header_params", {"region": "ap-south", "priority": 1})
        assert routed.is_error is False and routed.content[0].text == "Routed to ap-south."  # type: ignore[union-attr]
        assert routed.structured_content == {"text": "Routed to ap-south."}
        greeting = await client.call_tool("greet", {"name": "sep-2243"})
        assert greeting.content[0].text == "Hello, sep-2243!"  # type: ignore[union-attr]
        with pytest.raises(MCPError) as refused:
            await client.call_tool("test_missing_capability", {})  # the SDK declared no sampling
        assert refused.value.error.code == -32021
