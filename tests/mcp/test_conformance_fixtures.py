"""The fixture tools the MCP conformance suite calls by name behave as real tools on a live host.

Driven with the `mcp` SDK client (mode 2026-07-28): two MRTR rounds with a fresh requestState each,
a tool error that is a result and never a JSON-RPC error, and -32021 naming the capability an
interrupting tool needs when the caller did not declare it.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp.sdk_client import CreatedTask, TasksExtension, mcp_client, task_cancel

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def key(live_url: str, live_worker, make_key) -> str:  # type: ignore[no-untyped-def]
    return make_key("acme")


async def _fill(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    assert isinstance(params, types.ElicitRequestFormParams)
    answers = {"name": "Alice", "color": "blue", "ok": True, "confirm": True}
    fields = params.requested_schema["properties"]
    return types.ElicitResult(action="accept", content={k: answers[k] for k in fields})


async def test_multi_round_asks_twice_with_a_new_request_state(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key, elicitation_callback=_fill) as client:
        session = client.session
        first = await session.call_tool("test_input_required_result_multi_round", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        [(key1, request1)] = first.input_requests.items()  # type: ignore[union-attr]
        assert set(request1.params.requested_schema["properties"]) == {"name"}  # type: ignore[union-attr]
        second = await session.call_tool(
            "test_input_required_result_multi_round",
            {},
            input_responses={key1: types.ElicitResult(action="accept", content={"name": "Alice"})},
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(second, types.InputRequiredResult) and second.request_state != first.request_state
        [(key2, request2)] = second.input_requests.items()  # type: ignore[union-attr]
        assert key2 != key1 and set(request2.params.requested_schema["properties"]) == {"color"}  # type: ignore[union-attr]
        done = await session.call_tool(
            "test_input_required_result_multi_round",
            {},
            input_responses={key2: types.ElicitResult(action="accept", content={"color": "blue"})},
            request_state=second.request_state,
            allow_input_required=True,
        )
        assert isinstance(done, types.CallToolResult) and done.is_error is False
        # The SDK's own MRTR loop gets the same answers through the callback.
        again = await client.call_tool("test_input_required_result_multi_round", {})
        assert again.is_error is False and again.structured_content == done.structured_content


async def test_greet_text_and_error_fixtures(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key, elicitation_callback=_fill) as client:
        greet = await client.call_tool("greet", {"name": "World"})
        assert greet.structured_content == {"text": "Hello, World!"} and "Hello, World!" in greet.content[0].text  # type: ignore[union-attr]
        text = await client.call_tool("test_simple_text", {})
        assert text.is_error is False and text.content[0].type == "text"
        error = await client.call_tool("test_error_handling", {})
        assert error.is_error is True and "tool_error" in error.content[0].text  # type: ignore[union-attr]
        confirmed = await client.call_tool("confirm_delete", {"filename": "x.txt"})
        assert confirmed.is_error is False and confirmed.structured_content == {"answers": {"confirm": True}}


async def test_missing_capability_names_what_each_tool_needs(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key) as client:  # no callbacks: nothing declared
        with pytest.raises(MCPError) as refused:
            await client.call_tool("test_missing_capability", {})  # a sampling node
        with pytest.raises(MCPError) as form:
            await client.call_tool("test_input_required_result_elicitation", {})  # an input node
    assert refused.value.error.code == -32021
    assert refused.value.error.data == {"requiredCapabilities": {"sampling": {}}}
    assert form.value.error.code == -32021
    assert form.value.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}


async def test_with_tasks_a_quick_tool_is_answered_directly_and_a_slow_one_is_a_task(live_url: str, key: str) -> None:
    tasks = TasksExtension()
    async with mcp_client(live_url, key, extensions=[tasks]) as client:
        greet = await client.call_tool("greet", {"name": "World"})
        assert greet.structured_content == {"text": "Hello, World!"} and tasks.seen == []  # no task was made
        slow = await client.call_tool("conformance-delay", {"delayMs": 2500})
        assert slow.structured_content == {"delayedMs": 2500}
        assert tasks.seen and tasks.seen[-1].status == "completed"  # resolved by polling the task


class RecordingTasks(TasksExtension):
    """Keeps each CreateTaskResult as it arrived; `cancel_first` sends tasks/cancel before polling."""

    def __init__(self, *, cancel_first: bool = False) -> None:
        super().__init__()
        self.created: list[CreatedTask] = []
        self.cancel_first = cancel_first

    async def _resolve(self, created: CreatedTask, ctx: Any) -> types.CallToolResult:
        self.created.append(created)
        if self.cancel_first:
            await task_cancel(ctx.session, created.task_id)
        return await super()._resolve(created, ctx)


async def test_slow_compute_is_a_task_that_completes_or_is_cancelled(live_url: str, key: str) -> None:
    """The suite's `slow_compute` (tasks extension): a flat CreateTaskResult, then the result; a
    cancel while it sleeps settles `cancelled`; without the extension `seconds: 0` answers directly."""
    tasks = RecordingTasks()
    async with mcp_client(live_url, key, extensions=[tasks]) as client:
        done = await client.call_tool("slow_compute", {"seconds": 2, "label": "lifecycle-create"})
    [created] = tasks.created
    assert created.result_type == "task" and created.task_id and created.status == "working"
    assert done.is_error is False
    assert done.structured_content == {"text": "Computed after 2 s.", "label": "lifecycle-create"}
    assert tasks.seen[-1].status == "completed"

    cancelling = RecordingTasks(cancel_first=True)
    async with mcp_client(live_url, key, extensions=[cancelling]) as client:
        await client.call_tool("slow_compute", {"seconds": 60, "label": "lifecycle-cancel"})
    assert len(cancelling.created) == 1 and cancelling.seen[-1].status == "cancelled"

    async with mcp_client(live_url, key) as client:  # no tasks extension: a plain result
        direct = await client.call_tool("slow_compute", {"seconds": 0, "label": "capability-no-ext"})
    assert direct.is_error is False and direct.structured_content["label"] == "capability-no-ext"  # type: ignore[index]
