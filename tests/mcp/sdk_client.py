"""The `mcp` SDK client set up for our mount: bearer auth, and a tasks-extension claim.

mcp 2.3.0 has no Tasks (python-sdk #2806), so the claim below is the smallest client side of
SEP-2663 a test needs: it resolves a `resultType: "task"` by polling `tasks/get`, answering
`inputRequests` through `tasks/update`, and returns the task's CallToolResult.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio
import httpx2
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CallToolResult, RequestParams, Result
from mcp_types import Request as McpRequest

TASKS = "io.modelcontextprotocol/tasks"


def bearer_transport(url: str, key: str):  # type: ignore[no-untyped-def]
    http: httpx2.AsyncClient = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    return streamable_http_client(url, http_client=http)


def mcp_client(base_url: str, key: str, *, mode: str = "2026-07-28", **kwargs: Any) -> Client:
    return Client(bearer_transport(f"{base_url}/mcp", key), mode=mode, **kwargs)


class CreatedTask(Result):
    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskIdParams(RequestParams):
    task_id: str
    input_responses: dict[str, Any] | None = None


class TasksGet(McpRequest[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class TasksUpdate(McpRequest[TaskIdParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: TaskIdParams
    name_param = "taskId"


class TasksCancel(McpRequest[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class TaskState(Result):
    result_type: str
    task_id: str
    status: str
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None


Answer = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


async def task_get(session: Any, task_id: str) -> TaskState:
    return await session.send_request(TasksGet(params=TaskIdParams(task_id=task_id)), TaskState)


async def task_update(session: Any, task_id: str, responses: dict[str, Any]) -> Result:
    return await session.send_request(
        TasksUpdate(params=TaskIdParams(task_id=task_id, input_responses=responses)), Result
    )


async def task_cancel(session: Any, task_id: str) -> Result:
    return await session.send_request(TasksCancel(params=TaskIdParams(task_id=task_id)), Result)


class TasksExtension(ClientExtension):
    """Declares the extension and resolves CreateTaskResult by polling."""

    identifier = TASKS

    def __init__(self, answer: Answer | None = None) -> None:
        self.answer = answer
        self.seen: list[TaskState] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
        answered: set[str] = set()
        with anyio.fail_after(60):
            while True:
                state = await task_get(ctx.session, created.task_id)
                self.seen.append(state)
                if state.status in ("completed", "failed", "cancelled"):
                    if state.result is None:
                        return CallToolResult(content=[], is_error=True)
                    return CallToolResult.model_validate(state.result, by_name=False)
                pending = {k: v for k, v in (state.input_requests or {}).items() if k not in answered}
                if pending and self.answer is not None:
                    responses = {key: await self.answer(key, request) for key, request in pending.items()}
                    await task_update(ctx.session, created.task_id, responses)
                    answered.update(pending)
                await anyio.sleep((created.poll_interval_ms or 200) / 1000 / 5)
