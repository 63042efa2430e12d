"""The A2A TCK fixture agent (apps/a2a/tck.py), driven like the TCK drives it: a2a-sdk clients on
a live host, messages naming no skill, behaviour chosen by the messageId prefix.

One test per scenario prefix of the TCK's `scenarios/*.feature` (branch 1.0-dev), plus the routing
rules (a named skill wins; a disabled `a2a-tck` route turns prefix routing off) and isolation (a
TCK task is another tenant's like any task)."""

from __future__ import annotations

import base64
import time
import uuid

import pytest
from a2a.client import Client
from a2a.types import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct

from apps.a2a.models import SkillRoute
from apps.a2a.services import DEFAULT_SKILL
from apps.a2a.tck import RESUBSCRIBE_MESSAGE_ID, TCK_WORKFLOW_ID, tck_scenario
from apps.runs.models import Run
from tests.a2a.live import Session, db_read

COMPLETED, WORKING = TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_WORKING
TEXT_FILE = ("output.txt", "text/plain")


def tck_message(prefix: str, *, text: str = "TCK test", skill: str | None = None, **fields: str) -> Message:
    """A message as the TCK sends it: `<prefix>-<session>` messageId, one text part, no skill."""
    message = Message(role=Role.ROLE_USER, message_id=f"{prefix}-{uuid.uuid4().hex[:8]}", **fields)
    message.parts.append(Part(text=text))
    if skill is not None:
        metadata = Struct()
        metadata.update({"openwop": {"skillId": skill}})
        message.metadata.CopyFrom(metadata)
    return message


async def send_task(client: Client, message: Message, *, immediately: bool = False) -> Task:
    request = SendMessageRequest(message=message)
    if immediately:
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    [event] = [e async for e in client.send_message(request)]
    assert event.HasField("task"), event
    return event.task


def first_part(task: Task) -> dict:
    """The first artifact's first part (the TCK checks `artifacts[0].parts[0]`)."""
    assert task.artifacts, task
    return json_format.MessageToDict(task.artifacts[0].parts[0])


async def workflow_of(task_id: str) -> str:
    run = await db_read(lambda: Run.unscoped_all_tenants.select_related("workflow").get(run_id=task_id))
    return run.workflow.workflow_id


def test_scenario_prefixes_match_longest_first() -> None:
    assert tck_scenario("tck-artifact-file-url-abc") == "tck-artifact-file-url"
    assert tck_scenario("tck-artifact-file-abc") == "tck-artifact-file"
    assert tck_scenario("tck-something-new-abc") == "tck-complete-task"  # unknown tck- prefix completes
    assert tck_scenario(RESUBSCRIBE_MESSAGE_ID) == RESUBSCRIBE_MESSAGE_ID
    assert tck_scenario("live-123") is None


# ---------------------------------------------------------------------------------------------
# SendMessage scenarios (core_operations.feature)


COMPLETION_PARTS = {
    "tck-complete-task": {"text": "Hello from TCK"},
    "tck-artifact-text": {"text": "Generated text content"},
    "tck-artifact-file": {
        "raw": base64.b64encode(b"TCK file artifact content\n").decode(),
        "filename": TEXT_FILE[0],
        "mediaType": TEXT_FILE[1],
    },
    "tck-artifact-file-url": {
        "url": "https://example.com/output.txt",
        "filename": TEXT_FILE[0],
        "mediaType": TEXT_FILE[1],
    },
    "tck-artifact-data": {"data": {"key": "value", "count": 42.0}},
    # The map: SendMessage without taskId starts a run and answers its Task, never a bare Message.
    "tck-message-response": {"text": "Direct message response"},
}


def _cases(prefixes: list[str], both: str) -> list[tuple[str, str]]:
    """Every prefix on JSON-RPC, and `both` on HTTP+JSON too: the fixture is binding-agnostic and
    both bindings are covered op by op in test_live_sdk.py, so one REST case per group suffices."""
    return [(prefix, "JSONRPC") for prefix in prefixes] + [(both, "HTTP+JSON")]


COMPLETION_CASES = _cases(sorted(COMPLETION_PARTS), "tck-artifact-file-url")


@pytest.mark.parametrize(("prefix", "sessions"), COMPLETION_CASES, indirect=["sessions"])
async def test_completion_scenarios(sessions: dict[str, Session], prefix: str) -> None:
    acme, globex = sessions["acme"].client(), sessions["globex"].client()
    task = await send_task(acme, tck_message(prefix))
    assert task.status.state == COMPLETED
    assert first_part(task) == COMPLETION_PARTS[prefix]
    assert task.artifacts[0].artifact_id and task.artifacts[0].name == prefix
    assert await workflow_of(task.id) == TCK_WORKFLOW_ID
    # GetTask shows the same artifact; another tenant's caller finds no such task.
    assert first_part(await acme.get_task(GetTaskRequest(id=task.id))) == COMPLETION_PARTS[prefix]
    with pytest.raises(TaskNotFoundError):
        await globex.get_task(GetTaskRequest(id=task.id))


@pytest.mark.parametrize("sessions", ["JSONRPC"], indirect=True)
async def test_input_required_then_a_plain_text_answer_completes(sessions: dict[str, Session]) -> None:
    acme, globex = sessions["acme"].client(), sessions["globex"].client()
    waiting = await send_task(acme, tck_message("tck-input-required"))
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert waiting.status.message.parts[0].text
    # Another tenant cannot answer it: the task does not exist for them.
    with pytest.raises(TaskNotFoundError):
        await send_task(globex, tck_message("tck-complete-task", task_id=waiting.id))
    # A text-only follow-up (what the TCK sends) is the resume value {"text": ...}.
    done = await send_task(acme, tck_message("tck-complete-task", text="the answer", task_id=waiting.id))
    assert done.id == waiting.id and done.status.state == COMPLETED and done.context_id == waiting.context_id
    outputs = json_format.MessageToDict(done.artifacts[-1].parts[0].data)
    assert outputs["answer"] == {"text": "the answer"}
    assert [m.parts[0].text for m in done.history] == ["TCK test", "the answer"]


@pytest.mark.parametrize("sessions", ["HTTP+JSON"], indirect=True)
async def test_reject_task_fails_the_run(sessions: dict[str, Session]) -> None:
    """The forward projection has no REJECTED row (interop map `a2a.taskState`): FAILED, code `rejected`."""
    task = await send_task(sessions["acme"].client(), tck_message("tck-reject-task"))
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert task.status.message.parts[0].text == "rejected"
    assert json_format.MessageToDict(task.status.message.parts[1].data) == {"code": "rejected"}


# ---------------------------------------------------------------------------------------------
# Streaming scenarios (streaming.feature)


STREAM_TEXT = {
    "tck-stream-001": "Stream hello from TCK",
    "tck-stream-003": "Stream task lifecycle",
    "tck-stream-ordering-001": "Ordered output",
    "tck-stream-artifact-text": "Streamed text content",
    "tck-stream-artifact-chunked": "chunk-1 chunk-2",  # one artifact: the run log has no chunks
}


def kinds(events: list[StreamResponse]) -> list[str]:
    out = []
    for event in events:
        kind = event.WhichOneof("payload")
        if kind == "status_update":
            out.append(TaskState.Name(event.status_update.status.state))
        elif kind == "artifact_update":
            out.append(f"artifact:{event.artifact_update.artifact.name}")
        else:
            out.append(kind)
    return out


STREAM_PREFIXES = [*sorted(STREAM_TEXT), "tck-stream-002", "tck-stream-artifact-file"]


@pytest.mark.parametrize(("prefix", "sessions"), _cases(STREAM_PREFIXES, "tck-stream-001"), indirect=["sessions"])
async def test_stream_scenarios(sessions: dict[str, Session], prefix: str) -> None:
    acme = sessions["acme"].client(streaming=True)
    events = [e async for e in acme.send_message(SendMessageRequest(message=tck_message(prefix)))]
    seen = kinds(events)
    assert seen[0] == "task" and seen[-1] == "TASK_STATE_COMPLETED"
    assert "TASK_STATE_WORKING" in seen and seen.index("TASK_STATE_WORKING") < len(seen) - 1
    scenario_artifacts = [e.artifact_update.artifact for e in events if e.artifact_update.artifact.name == prefix]
    if prefix == "tck-stream-002":
        assert scenario_artifacts == []  # status updates only
        return
    [artifact] = scenario_artifacts
    assert seen.index(f"artifact:{prefix}") > seen.index("TASK_STATE_WORKING")
    part = json_format.MessageToDict(artifact.parts[0])
    if prefix == "tck-stream-artifact-file":
        assert (part["filename"], part["mediaType"]) == TEXT_FILE and part["raw"]
    else:
        assert part == {"text": STREAM_TEXT[prefix]}


@pytest.mark.parametrize("sessions", ["JSONRPC"], indirect=True)
async def test_resubscribe_scenario_stays_working_then_completes(sessions: dict[str, Session]) -> None:
    acme, globex = sessions["acme"], sessions["globex"]
    message = Message(role=Role.ROLE_USER, message_id=RESUBSCRIBE_MESSAGE_ID, parts=[Part(text="long")])
    started = time.monotonic()
    task = await send_task(acme.client(), message, immediately=True)
    assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, WORKING)
    with pytest.raises(TaskNotFoundError):
        [e async for e in globex.client(streaming=True).subscribe(SubscribeToTaskRequest(id=task.id))]
    events = [e async for e in acme.client(streaming=True).subscribe(SubscribeToTaskRequest(id=task.id))]
    assert events[0].task.id == task.id and events[0].task.status.state != COMPLETED
    assert kinds(events)[-1] == "TASK_STATE_COMPLETED"
    assert time.monotonic() - started >= 3.5  # WORKING for ~4 s (2x the TCK's streaming timeout)


# ---------------------------------------------------------------------------------------------
# Routing rules


@pytest.mark.parametrize("sessions", ["JSONRPC"], indirect=True)
async def test_a_named_skill_wins_and_a_disabled_route_turns_prefix_routing_off(sessions: dict[str, Session]) -> None:
    acme = sessions["acme"].client()
    named = await send_task(acme, tck_message("tck-complete-task", skill="echo"))
    assert await workflow_of(named.id) == "echo"
    plain = await send_task(acme, tck_message("live-not-tck"))
    assert await workflow_of(plain.id) == DEFAULT_SKILL == "echo"  # the host's default skill

    await db_read(lambda: SkillRoute.objects.filter(workflow_id=TCK_WORKFLOW_ID).update(enabled=False))
    routed_off = await send_task(acme, tck_message("tck-complete-task"))
    assert routed_off.status.state == TaskState.TASK_STATE_COMPLETED
    assert await workflow_of(routed_off.id) == DEFAULT_SKILL  # echo, not the TCK scenario
