"""Inline advance, black-box: real clients against a live uvicorn whose queue NO Celery worker
consumes (its own queue name), so whatever completes was run by the web process itself.

- a blocking A2A SendMessage (both bindings, a2a-sdk) and an MCP tools/call (mcp SDK) of instant
  workflows answer completed with no worker at all;
- a run whose second node is a delay is handed off there: with no worker it stays working (lease
  released, the delay not started), a worker started afterwards completes it;
- OPENWOP_INLINE_MAX_NODES=0 is the queue again: nothing runs until a worker does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct
from mcp_types import CallToolResult

from apps.agents.services import workflow_create
from apps.runs.models import Run, RunEvent, RunStatus
from apps.tenants.models import Tenant
from tests.a2a.live import Session, db_read, live_card
from tests.live import LiveProcess, start_celery_worker, start_web, wait_until
from tests.mcp.sdk_client import CreatedTask, TasksExtension, mcp_client

pytestmark = pytest.mark.django_db(transaction=True)


def _host(live_env: Any, suffix: str, **extra: str) -> Iterator[tuple[dict[str, str], str]]:
    env, var_dir = live_env
    own_env = {**env, "OPENWOP_CELERY_QUEUE": f"{env['OPENWOP_CELERY_QUEUE']}-{suffix}", **extra}
    daphne, base_url = start_web(own_env, var_dir)
    yield own_env, base_url
    daphne.stop()


@pytest.fixture(scope="module")
def workerless(live_env) -> Iterator[tuple[dict[str, str], str]]:  # type: ignore[no-untyped-def]
    """(env, url) of a uvicorn with inline advance on (the default) and no worker on its queue."""
    yield from _host(live_env, "inline")


@pytest.fixture(scope="module")
def workerless_queue_only(live_env) -> Iterator[tuple[dict[str, str], str]]:  # type: ignore[no-untyped-def]
    yield from _host(live_env, "noinline", OPENWOP_INLINE_MAX_NODES="0")


@pytest.fixture
def worker_for(live_env) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    started: list[LiveProcess] = []

    def start(env: dict[str, str]) -> LiveProcess:
        started.append(start_celery_worker(env, live_env[1], name=f"inline-{len(started)}"))
        return started[-1]

    yield start
    for worker in started:
        worker.stop()


class FirstAnswer(TasksExtension):
    """Declares the tasks extension and keeps the CreateTaskResult without polling it."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[CreatedTask] = []

    async def _resolve(self, created: CreatedTask, ctx: Any) -> CallToolResult:
        self.created.append(created)
        return CallToolResult(content=[], is_error=False)


def _message(skill: str, data: dict[str, Any]) -> Message:
    message = Message(role=Role.ROLE_USER, message_id=f"inline-{uuid.uuid4()}")
    message.parts.append(json_format.ParseDict({"data": data}, Part()))
    metadata = Struct()
    metadata.update({"openwop": {"skillId": skill}})
    message.metadata.CopyFrom(metadata)
    return message


def _run(run_id: str) -> Run:
    return Run.unscoped_all_tenants.get(run_id=run_id)


def _types(run_id: str) -> list[str]:
    return list(
        RunEvent.unscoped_all_tenants.filter(run__run_id=run_id).order_by("sequence").values_list("type", flat=True)
    )


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_blocking_send_completes_with_no_worker_running(workerless, make_key, binding: str) -> None:  # type: ignore[no-untyped-def]
    _, url = workerless
    key = await db_read(lambda: make_key("acme"))
    session = Session(await live_card(url), binding, key)
    try:
        [event] = [
            e
            async for e in session.client().send_message(
                SendMessageRequest(message=_message("echo", {"greeting": "hi"}))
            )
        ]
    finally:
        await session.close()
    task = event.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    run = await db_read(lambda: _run(task.id))
    assert run.lease_owner == "" and run.outputs == {"greeting": "hi"}


async def test_an_mcp_tool_is_answered_with_no_worker_running(workerless, make_key) -> None:  # type: ignore[no-untyped-def]
    _, url = workerless
    key = await db_read(lambda: make_key("acme"))
    tasks = FirstAnswer()
    async with mcp_client(url, key, extensions=[tasks]) as client:
        greet = await client.call_tool("greet", {"name": "World"})
    assert greet.structured_content == {"text": "Hello, World!"} and tasks.created == []  # direct, no task


async def test_a_delay_after_an_instant_node_is_handed_to_the_worker(workerless, make_key, worker_for) -> None:  # type: ignore[no-untyped-def]
    env, url = workerless

    def seed() -> str:
        key = make_key("acme")
        workflow_create(
            tenant=Tenant.objects.get(slug="acme"),
            workflow_id="echo-then-delay",
            definition={
                "nodes": [
                    {"id": "first", "kind": "echo"},
                    {"id": "wait", "kind": "delay", "config": {"delayMs": 200}},
                ]
            },
            input_schema={"type": "object"},
        )
        return key

    key = await db_read(seed)
    tasks = FirstAnswer()
    async with mcp_client(url, key, extensions=[tasks]) as client:
        await client.call_tool("echo-then-delay", {})
    [created] = tasks.created
    assert created.status == "working"
    run = await db_read(lambda: Run.unscoped_all_tenants.get(workflow__workflow_id="echo-then-delay"))
    # The echo ran in the web process; the delay was handed off before it started.
    assert run.status == RunStatus.RUNNING and run.node_index == 1 and run.lease_owner == ""
    assert await db_read(lambda: _types(run.run_id)) == ["run.started", "node.started", "node.completed"]

    worker_for(env)
    await db_read(lambda: wait_until(lambda: _run(run.run_id).status == RunStatus.COMPLETED, "the worker"))
    assert (await db_read(lambda: _types(run.run_id)))[-1] == "run.completed"


async def test_zero_inline_nodes_is_the_queue_again(workerless_queue_only, make_key, worker_for) -> None:  # type: ignore[no-untyped-def]
    env, url = workerless_queue_only
    key = await db_read(lambda: make_key("acme"))
    tasks = FirstAnswer()
    async with mcp_client(url, key, extensions=[tasks]) as client:
        await client.call_tool("greet", {"name": "World"})
    [created] = tasks.created  # nothing ran it within the grace: a task
    assert created.status == "working"
    run = await db_read(lambda: Run.unscoped_all_tenants.get(workflow__workflow_id="greet"))
    assert run.status == RunStatus.PENDING and await db_read(lambda: _types(run.run_id)) == ["run.started"]

    worker_for(env)
    await db_read(lambda: wait_until(lambda: _run(run.run_id).status == RunStatus.COMPLETED, "the worker"))
