"""Run -> A2A 1.0 wire, with a2a-sdk's protobuf types (never a hand-written schema).

Below every app that speaks it: the A2A door (apps/a2a) answers with these Tasks and streams, and
push delivery (apps/push) sends the same statusUpdates to a task's push configs.

The task-state projection is the interop map's table (openwop-v2 reference (c).3): waiting runs
are INPUT_REQUIRED, except a run suspended on a `credential` interrupt, which is AUTH_REQUIRED
with a status message naming the provider and carrying `connectUrl` (interop.md §The durable-task
projection), and never otherwise. `Task.history` holds only the A2A Messages sent to the task;
artifacts are the run's `artifact.created` events plus, once completed, its outputs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage

from apps.runs.models import Run, RunEvent, RunStatus
from apps.runs.reads import OpenInterrupt, RunRow, RunSnapshot

# Artifact id of a completed run's outputs: stable across reads (map `a2a.fields`).
OUTPUTS_ARTIFACT_ID = "outputs"

STATE_BY_STATUS: dict[str, int] = {
    RunStatus.PENDING: TaskState.TASK_STATE_SUBMITTED,
    RunStatus.RUNNING: TaskState.TASK_STATE_WORKING,
    RunStatus.CANCELLING: TaskState.TASK_STATE_WORKING,
    RunStatus.WAITING_APPROVAL: TaskState.TASK_STATE_INPUT_REQUIRED,
    RunStatus.WAITING_INPUT: TaskState.TASK_STATE_INPUT_REQUIRED,
    RunStatus.WAITING_EXTERNAL: TaskState.TASK_STATE_INPUT_REQUIRED,
    RunStatus.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    RunStatus.FAILED: TaskState.TASK_STATE_FAILED,
    RunStatus.CANCELLED: TaskState.TASK_STATE_CANCELED,
}
TERMINAL_STATES = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
INTERRUPTED_STATES = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})


def to_wire(message: ProtoMessage) -> dict[str, Any]:
    """ProtoJSON: camelCase names, enum names, RFC 3339 timestamps."""
    return json_format.MessageToDict(message, preserving_proto_field_name=False)


def context_id_of(run: Run | RunRow) -> str:
    """A run not started over A2A has no contextId of its own: its runId stands in (reference host)."""
    return run.context_id or run.run_id


def _stable_id(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


# ---------------------------------------------------------------------------------------------
# Interrupts


def interrupt_metadata(interrupt: OpenInterrupt) -> dict[str, Any]:
    """`metadata.openwop.interrupt`, the carrier the map names for INPUT/AUTH_REQUIRED."""
    doc: dict[str, Any] = {"interruptId": interrupt.interrupt_id, "nodeId": interrupt.node_id, "kind": interrupt.kind}
    doc.update({key: interrupt.payload[key] for key in ("data", "resumeSchema") if key in interrupt.payload})
    return {"openwop": {"interrupt": doc}}


def interrupted_state(interrupt: OpenInterrupt | None) -> int:
    if interrupt is not None and interrupt.kind == "credential":
        return TaskState.TASK_STATE_AUTH_REQUIRED
    return TaskState.TASK_STATE_INPUT_REQUIRED


def _agent_message(*, message_id: str, task_id: str, context_id: str, parts: list[dict[str, Any]]) -> Message:
    message = Message(message_id=message_id, task_id=task_id, context_id=context_id, role=Role.ROLE_AGENT)
    for part in parts:
        message.parts.append(json_format.ParseDict(part, Part()))
    return message


def interrupt_status_message(interrupt: OpenInterrupt, *, task_id: str, context_id: str) -> Message:
    data = interrupt.payload.get("data") or {}
    if interrupt.kind == "credential":
        provider, connect_url = data.get("provider", ""), data.get("connectUrl", "")
        text = f"Connect your {provider} account to continue: {connect_url}"
        parts: list[dict[str, Any]] = [{"text": text}, {"data": {"provider": provider, "connectUrl": connect_url}}]
    else:
        text = str(data.get("title") or f"The task is waiting for {interrupt.kind or 'input'}.")
        parts = [{"text": text}, {"data": data}] if data else [{"text": text}]
    return _agent_message(
        message_id=f"status-{_stable_id(interrupt.interrupt_id)}", task_id=task_id, context_id=context_id, parts=parts
    )


def failure_status_message(error: dict[str, Any] | None, *, task_id: str, context_id: str, key: str) -> Message:
    error = error or {}
    text = str(error.get("message") or "The task failed.")
    parts: list[dict[str, Any]] = [{"text": text}]
    if error.get("code"):
        parts.append({"data": {"code": error["code"]}})
    return _agent_message(message_id=f"status-{_stable_id(key)}", task_id=task_id, context_id=context_id, parts=parts)


# ---------------------------------------------------------------------------------------------
# Artifacts


def artifact_from_payload(payload: dict[str, Any]) -> Artifact:
    return json_format.ParseDict(
        {"artifactId": payload["artifactId"], "name": payload.get("name", ""), "parts": payload.get("parts", [])},
        Artifact(),
        ignore_unknown_fields=True,
    )


def outputs_artifact(outputs: Any) -> Artifact | None:
    """The completed run's outputs as one data part; None when there are none (`None` or `{}`):
    an artifact's parts are content, and an empty Part `{}` is no Part of A2A 1.0's oneof."""
    if outputs is None or outputs == {}:
        return None
    if not isinstance(outputs, dict):
        return json_format.ParseDict(
            {"artifactId": OUTPUTS_ARTIFACT_ID, "name": "outputs", "parts": [{"data": outputs}]}, Artifact()
        )
    # The same message ParseDict builds (Struct.update converts as it does), at a quarter of its
    # cost: every completed Task carries it, on every GetTask.
    artifact = Artifact(artifact_id=OUTPUTS_ARTIFACT_ID, name="outputs")
    artifact.parts.add().data.struct_value.update(outputs)
    return artifact


# ---------------------------------------------------------------------------------------------
# The Task


def task_status(run: RunRow, interrupt: OpenInterrupt | None) -> TaskStatus:
    state = STATE_BY_STATUS[run.status]
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        state = interrupted_state(interrupt)
    status = TaskStatus(state=state)  # type: ignore[arg-type]
    status.timestamp.FromDatetime(run.updated_at)
    context_id = context_id_of(run)
    if state in INTERRUPTED_STATES and interrupt is not None:
        status.message.CopyFrom(interrupt_status_message(interrupt, task_id=run.run_id, context_id=context_id))
    elif state == TaskState.TASK_STATE_FAILED:
        status.message.CopyFrom(
            failure_status_message(run.error, task_id=run.run_id, context_id=context_id, key=run.run_id)
        )
    return status


def task_from_view(view: RunSnapshot, *, history_length: int | None = None, include_artifacts: bool = True) -> Task:
    """The Task of a run read with its Messages (`documents`: selectors.TASK_MESSAGES)."""
    run = view.run
    task = Task(id=run.run_id, context_id=context_id_of(run))
    task.status.CopyFrom(task_status(run, view.open_interrupt))
    if include_artifacts:
        for artifact in view.artifacts:
            task.artifacts.append(artifact_from_payload(artifact.payload))
        outputs = outputs_artifact(run.outputs) if run.status == RunStatus.COMPLETED else None
        if outputs is not None:
            task.artifacts.append(outputs)
    # §3.2.4: unset = the server's default (all); 0 = none; n = the n most recent.
    messages = view.documents if history_length is None else view.documents[-history_length:] if history_length else []
    for doc in messages:
        task.history.append(json_format.ParseDict(doc, Message(), ignore_unknown_fields=True))
    if view.open_interrupt is not None and task.status.state in INTERRUPTED_STATES:
        task.metadata.update(interrupt_metadata(view.open_interrupt))
    return task


# ---------------------------------------------------------------------------------------------
# Streaming: the run log projected as StreamResponse events


@dataclass
class StreamProjection:
    """Folds run events into status/artifact updates, one statusUpdate per state change."""

    task_id: str
    context_id: str
    state: int
    pending_interrupt: dict[str, Any] | None = None  # the interrupt.requested payload awaiting its suspend
    ended: bool = False  # terminal status sent
    interrupted: bool = False  # the newest status is INPUT/AUTH_REQUIRED

    def project(self, events: Iterable[RunEvent]) -> list[StreamResponse]:
        return [response for event in events for response in self._one(event)]

    def _status(
        self, state: int, at: datetime, *, message: Message | None = None, metadata: Any = None
    ) -> StreamResponse:
        self.state = state
        self.interrupted = state in INTERRUPTED_STATES
        self.ended = state in TERMINAL_STATES
        update = TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id)
        update.status.state = state  # type: ignore[assignment]
        update.status.timestamp.FromDatetime(at)
        if message is not None:
            update.status.message.CopyFrom(message)
        if metadata:
            update.metadata.update(metadata)
        return StreamResponse(status_update=update)

    def _artifact(self, artifact: Artifact) -> StreamResponse:
        update = TaskArtifactUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, append=False, last_chunk=True
        )
        update.artifact.CopyFrom(artifact)
        return StreamResponse(artifact_update=update)

    def _one(self, event: RunEvent) -> list[StreamResponse]:
        kind = event.type
        if kind in ("node.started", "interrupt.resolved"):
            if self.state != TaskState.TASK_STATE_WORKING:
                return [self._status(TaskState.TASK_STATE_WORKING, event.at)]
            return []
        if kind == "interrupt.requested":
            self.pending_interrupt = dict(event.payload)
            return []
        if kind == "node.suspended":
            interrupt = OpenInterrupt(
                interrupt_id=str(event.payload.get("interruptId", "")),
                node_id=event.node_id,
                payload=self.pending_interrupt or {"kind": event.payload.get("kind", "")},
            )
            message = interrupt_status_message(interrupt, task_id=self.task_id, context_id=self.context_id)
            metadata = interrupt_metadata(interrupt)
            return [self._status(interrupted_state(interrupt), event.at, message=message, metadata=metadata)]
        if kind == "artifact.created":
            return [self._artifact(artifact_from_payload(event.payload))]
        if kind == "run.completed":
            outputs = outputs_artifact(event.payload.get("outputs"))
            artifact = [] if outputs is None else [self._artifact(outputs)]
            return [*artifact, self._status(TaskState.TASK_STATE_COMPLETED, event.at)]
        if kind == "run.failed":
            message = failure_status_message(
                event.payload.get("error"), task_id=self.task_id, context_id=self.context_id, key=self.task_id
            )
            return [self._status(TaskState.TASK_STATE_FAILED, event.at, message=message)]
        if kind == "run.cancelled":
            return [self._status(TaskState.TASK_STATE_CANCELED, event.at)]
        return []  # internal events never reach the wire (map: StreamResponse)
