"""The A2A operations, binding-agnostic: proto request in, proto result (or a stream plan) out.

Each is the interop map's row for it (openwop-v2 reference (c).1): SendMessage -> createRun or
resolveInterruptByRun, GetTask -> getRun, ListTasks -> listRuns' visibility, CancelTask ->
cancelRun, SubscribeToTask -> streamRunEvents. Both bindings (views.py) call these and differ only
in how they parse and render. Database work runs in `sync_to_async` calls that end before any
wait or stream begins.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
)
from a2a.utils.proto_utils import validate_proto_required_fields
from asgiref.sync import sync_to_async
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage

from apps.a2a.card import A2AFeatures
from apps.a2a.errors import invalid_params
from apps.a2a.selectors import task_page, task_run_readable, task_view_of
from apps.a2a.services import message_continue, message_start, skill_resolve, task_cancel
from apps.a2a.streams import run_wait_settled
from apps.a2a.wire import TERMINAL_STATES, task_from_view
from apps.runs.models import Run
from apps.tenants.subject import Subject

CONTEXT_ID_MAX = 256


@dataclass(frozen=True, slots=True)
class Call:
    subject: Subject
    features: A2AFeatures


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """What a streaming operation hands its binding: the first Task and where the log resumes."""

    run: Run
    first: Task
    position: int
    end_when_interrupted: bool


# ---------------------------------------------------------------------------------------------
# Reading a message


def _plain(value: Any) -> Any:
    """Struct numbers are doubles: give integral ones back as ints (workflow inputs are JSON)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _struct(message: ProtoMessage, field: str) -> dict[str, Any]:
    if not message.HasField(field):
        return {}
    return _plain(json_format.MessageToDict(getattr(message, field)))


def _openwop(metadata: dict[str, Any]) -> dict[str, Any]:
    value = metadata.get("openwop")
    return value if isinstance(value, dict) else {}


def _first_data(message: Message) -> Any:
    for part in message.parts:
        if part.HasField("data"):
            return _plain(json_format.MessageToDict(part.data))
    return None


def skill_id_of(request: SendMessageRequest) -> str | None:
    """message.metadata.openwop.skillId, else the request's metadata.openwop.skillId."""
    for metadata in (_struct(request.message, "metadata"), _struct(request, "metadata")):
        skill = _openwop(metadata).get("skillId")
        if skill is not None:
            if not isinstance(skill, str) or not skill:
                raise invalid_params("metadata.openwop.skillId must be a non-empty string.", field="skillId")
            return skill
    return None


def inputs_of(message: Message) -> dict[str, Any]:
    """The run's inputs: the first data part when it is an object, else the text parts."""
    data = _first_data(message)
    if isinstance(data, dict):
        return data
    texts = [part.text for part in message.parts if part.HasField("text")]
    return {"text": "\n".join(texts)} if texts else {}


def resume_value_of(message: Message) -> Any:
    """metadata.openwop.interrupt, else the first data part (map SendMessage row with taskId)."""
    value = _openwop(_struct(message, "metadata")).get("interrupt")
    return value if value is not None else _first_data(message)


def _validated(request: ProtoMessage) -> None:
    try:
        validate_proto_required_fields(request)
    except InvalidParamsError as exc:
        errors = (exc.data or {}).get("errors") or [{"field": "params", "message": "Validation failed."}]
        first = errors[0]
        raise invalid_params(f"{first['field']}: {first['message']}", field=str(first["field"])) from None


# ---------------------------------------------------------------------------------------------
# SendMessage / SendStreamingMessage


def _snapshot(subject: Subject, run_id: str, history_length: int | None) -> tuple[Run, Task, int]:
    run = task_run_readable(subject=subject, task_id=run_id)
    return run, task_from_view(task_view_of(run), history_length=history_length), run.last_sequence


def _send_sync(call: Call, request: SendMessageRequest) -> Run:
    message = request.message
    if message.task_id:
        return message_continue(
            subject=call.subject, task_id=message.task_id, message=message, resume_value=resume_value_of(message)
        )
    if message.context_id and len(message.context_id) > CONTEXT_ID_MAX:
        raise invalid_params(f"contextId is at most {CONTEXT_ID_MAX} characters.", field="message.contextId")
    skill = skill_resolve(skill_id_of(request))
    return message_start(
        subject=call.subject,
        message=message,
        skill=skill,
        inputs=inputs_of(message),
        context_id=message.context_id or uuid.uuid4().hex,
    )


async def send_message(call: Call, request: SendMessageRequest, *, streaming: bool) -> Task | StreamPlan:
    _validated(request)
    if streaming and not call.features.streaming:
        raise UnsupportedOperationError("Streaming is not offered by this host.")
    configuration = request.configuration
    immediate = configuration.return_immediately
    if immediate and not call.features.durable_tasks:
        raise UnsupportedOperationError("returnImmediately needs durableTasks, which this host does not offer.")
    if configuration.HasField("task_push_notification_config") and not call.features.push_notifications:
        raise PushNotificationNotSupportedError()
    history_length = configuration.history_length if configuration.HasField("history_length") else None
    run = await sync_to_async(_send_sync)(call, request)
    if streaming:
        run, first, position = await sync_to_async(_snapshot)(call.subject, run.run_id, history_length)
        return StreamPlan(run=run, first=first, position=position, end_when_interrupted=True)
    if not immediate:
        await run_wait_settled(run)
    _, task, _ = await sync_to_async(_snapshot)(call.subject, run.run_id, history_length)
    return task


# ---------------------------------------------------------------------------------------------
# Tasks


async def get_task(call: Call, request: GetTaskRequest) -> Task:
    history_length = request.history_length if request.HasField("history_length") else None
    if history_length is not None and history_length < 0:
        raise invalid_params("historyLength must not be negative.", field="historyLength")
    _, task, _ = await sync_to_async(_snapshot)(call.subject, request.id, history_length)
    return task


def _list_sync(call: Call, request: ListTasksRequest) -> ListTasksResponse:
    history_length = request.history_length if request.HasField("history_length") else None
    if history_length is not None and history_length < 0:
        raise invalid_params("historyLength must not be negative.", field="historyLength")
    status_after = (
        request.status_timestamp_after.ToDatetime(tzinfo=dt.UTC) if request.HasField("status_timestamp_after") else None
    )
    include_artifacts = request.include_artifacts if request.HasField("include_artifacts") else False
    page = task_page(
        subject=call.subject,
        context_id=request.context_id or None,
        state=request.status or None,
        status_after=status_after,
        page_size=request.page_size if request.HasField("page_size") else None,
        page_token=request.page_token or None,
        include_artifacts=include_artifacts,
    )
    response = ListTasksResponse(
        next_page_token=page.next_page_token, page_size=page.page_size, total_size=page.total_size
    )
    for view in page.views:
        response.tasks.append(task_from_view(view, history_length=history_length, include_artifacts=include_artifacts))
    return response


async def list_tasks(call: Call, request: ListTasksRequest) -> ListTasksResponse:
    return await sync_to_async(_list_sync)(call, request)


def _cancel_sync(call: Call, request: CancelTaskRequest) -> Task:
    run = task_cancel(subject=call.subject, task_id=request.id)
    return _snapshot(call.subject, run.run_id, None)[1]


async def cancel_task(call: Call, request: CancelTaskRequest) -> Task:
    return await sync_to_async(_cancel_sync)(call, request)


async def subscribe(call: Call, request: SubscribeToTaskRequest) -> StreamPlan:
    """A read-only reattach: never re-executes or re-accepts (map SubscribeToTask row)."""
    if not (call.features.streaming and call.features.durable_tasks):
        raise UnsupportedOperationError("SubscribeToTask needs streaming and durableTasks.")
    run, first, position = await sync_to_async(_snapshot)(call.subject, request.id, None)
    if first.status.state in TERMINAL_STATES:
        raise UnsupportedOperationError("The task is terminal; there is nothing to subscribe to.")
    return StreamPlan(run=run, first=first, position=position, end_when_interrupted=False)


async def get_extended_card(call: Call) -> None:
    # capabilities.extendedAgentCard is false until per-agent cards are served (map row).
    raise ExtendedAgentCardNotConfiguredError()


async def push_config_unsupported(call: Call) -> None:
    # Map: all four push-config methods answer -32003 while a2a.pushNotifications is unadvertised.
    raise PushNotificationNotSupportedError()
