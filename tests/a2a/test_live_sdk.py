"""Black-box: the a2a-sdk 1.3.0 client against a live uvicorn + Celery worker, over both bindings
(`sessions`, conftest.py: one Session per tenant on the parametrized binding)."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError
from google.protobuf import json_format

from apps.audit.models import HostEvent
from apps.runs.models import Run
from tests.a2a.live import Session, db_read, only_task, reattached_until_done, send, until_terminal, user_message

BINDINGS = ["JSONRPC", "HTTP+JSON"]
APPROVAL = "conformance-approval"  # named: a message naming no skill runs echo (issue 53 item 6)


def _message(*, text: str | None = None, data: Any = None, skill: str | None = None, **fields: Any) -> Message:
    return user_message(prefix="live", text=text, data=data, skill=skill, **fields)


@pytest.mark.parametrize("sessions", BINDINGS, indirect=True)
async def test_send_get_list_cancel_and_isolation(sessions: dict[str, Session]) -> None:
    acme, globex = sessions["acme"].client(), sessions["globex"].client()

    # Blocking send: answered once the run is terminal, outputs as an artifact.
    echoed = await only_task(acme, _message(data={"greeting": "hi"}, skill="echo", context_id="ctx-live"))
    assert echoed.status.state == TaskState.TASK_STATE_COMPLETED
    assert echoed.id.startswith("acme/") and echoed.context_id == "ctx-live"
    outputs = json_format.MessageToDict(echoed.artifacts[-1].parts[0].data)
    assert outputs == {"greeting": "hi"}
    assert [m.message_id for m in echoed.history] == [echoed.history[0].message_id]
    run = await db_read(lambda: Run.unscoped_all_tenants.get(run_id=echoed.id))
    assert run.transport == "a2a"

    # returnImmediately, then cancel a long-running task.
    slow = await only_task(acme, _message(data={"waitMs": 120000}, skill="conformance-cancellable"), immediately=True)
    assert slow.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    cancelled = await acme.cancel_task(CancelTaskRequest(id=slow.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED  # the answer itself (issue 32 item 1)
    assert (await until_terminal(acme, slow.id)).status.state == TaskState.TASK_STATE_CANCELED

    # A failing workflow is FAILED with a status message, not an error.
    failed = await only_task(acme, _message(text="x", skill="conformance-failure"))
    assert failed.status.state == TaskState.TASK_STATE_FAILED and failed.status.message.parts[0].text

    # ListTasks: paging, filters, artifacts only on request, and only the caller's tenant.
    theirs = await only_task(globex, _message(text="hello", skill="echo", context_id="ctx-live"))
    first = await acme.list_tasks(ListTasksRequest(page_size=2))
    assert len(first.tasks) == 2 and first.next_page_token and first.total_size == 3
    rest = await acme.list_tasks(ListTasksRequest(page_size=2, page_token=first.next_page_token))
    assert rest.next_page_token == "" and len(rest.tasks) == 1
    ids = {t.id for t in [*first.tasks, *rest.tasks]}
    assert ids == {echoed.id, slow.id, failed.id} and theirs.id not in ids
    assert all(not t.artifacts for t in first.tasks)
    by_context = await acme.list_tasks(ListTasksRequest(context_id="ctx-live", include_artifacts=True))
    assert [t.id for t in by_context.tasks] == [echoed.id] and by_context.tasks[0].artifacts
    assert by_context.total_size == 1  # globex's task in the same contextId is not counted
    by_state = await acme.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_CANCELED))
    assert [t.id for t in by_state.tasks] == [slow.id] and by_state.total_size == 1
    assert (await globex.list_tasks(ListTasksRequest())).total_size == 1  # each tenant its own count

    # A foreign task is simply not there.
    with pytest.raises(TaskNotFoundError):
        await acme.get_task(GetTaskRequest(id=theirs.id))
    with pytest.raises(TaskNotFoundError):
        await acme.cancel_task(CancelTaskRequest(id=theirs.id))
    assert (await globex.get_task(GetTaskRequest(id=theirs.id))).status.state == TaskState.TASK_STATE_COMPLETED

    # Every exchange left its negotiation record as acme's durable host event.
    records = await db_read(
        lambda: list(HostEvent.unscoped_all_tenants.filter(tenant__slug="acme", type="negotiation.decided"))
    )
    assert len(records) >= 10 and all(r.payload["outcome"] == "accepted" for r in records)
    assert all(r.payload["requested"] == "1.0" and r.payload["version"] == "1.0" for r in records)


@pytest.mark.parametrize("sessions", BINDINGS, indirect=True)
async def test_multi_turn_approval_and_auth_required(sessions: dict[str, Session]) -> None:
    acme = sessions["acme"].client()

    # The approval fixture, named (the default skill is echo): a blocking send stops at INPUT_REQUIRED.
    waiting = await only_task(acme, _message(text="please approve", skill=APPROVAL))
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    interrupt = json_format.MessageToDict(waiting.metadata)["openwop"]["interrupt"]
    assert interrupt["kind"] == "approval" and interrupt["interruptId"].startswith("acme/")

    # The follow-up names only the task: the answer carries the task's contextId.
    done = await only_task(acme, _message(data={"action": "accept", "comment": "ok"}, task_id=waiting.id))
    assert done.id == waiting.id and done.context_id == waiting.context_id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert len(done.history) == 2

    # A retained terminal task takes no more messages.
    with pytest.raises(UnsupportedOperationError):
        await send(acme, _message(data={"action": "accept"}, task_id=waiting.id))

    # The credential fixture is AUTH_REQUIRED, with connectUrl in the status message.
    auth = await only_task(acme, _message(text="connect", skill="conformance-credential"))
    assert auth.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    connect = json_format.MessageToDict(auth.status.message.parts[1].data)
    assert connect["provider"] == "conformance" and connect["connectUrl"]
    resumed = await only_task(acme, _message(data={"action": "accept"}, task_id=auth.id))
    assert resumed.status.state == TaskState.TASK_STATE_COMPLETED


@pytest.mark.parametrize("sessions", BINDINGS, indirect=True)
async def test_streaming_send_and_subscribe(sessions: dict[str, Session]) -> None:
    acme = sessions["acme"]
    streaming, plain = acme.client(streaming=True), acme.client()

    # SendStreamingMessage: the Task first, then status updates, ending at the interrupt.
    # (How many updates follow depends on how far the worker got before the first read.)
    events = await send(streaming, _message(text="stream me", skill=APPROVAL))
    assert events[0].HasField("task")
    task_id, context_id = events[0].task.id, events[0].task.context_id
    updates = [e.status_update for e in events[1:]]
    assert all(e.HasField("status_update") for e in events[1:])
    assert all(u.task_id == task_id and u.context_id == context_id for u in updates)
    states = [events[0].task.status.state, *(u.status.state for u in updates)]
    order = [TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_INPUT_REQUIRED]
    assert states[-1] == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [order.index(s) for s in states] == sorted({order.index(s) for s in states})  # one update per change

    # SubscribeToTask reattaches: the current Task first, then everything up to the terminal status.
    accept = _message(data={"action": "accept"}, task_id=task_id)
    received = await reattached_until_done(streaming, plain, task_id, accept)
    kinds = [e.WhichOneof("payload") for e in received]
    assert kinds[0] == "task" and kinds[-1] == "status_update"
    assert received[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    artifacts = [e.artifact_update.artifact for e in received if e.HasField("artifact_update")]
    assert [a.artifact_id for a in artifacts] == ["outputs"]

    # A terminal task cannot be subscribed to.
    with pytest.raises(UnsupportedOperationError):
        [event async for event in streaming.subscribe(SubscribeToTaskRequest(id=task_id))]
