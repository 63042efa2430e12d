"""Runs and interrupts as MCP wire objects (interop map c.6): CallToolResult, InputRequests, Task.

Pure functions of rows already read; nothing here writes, so `tasks/get` appends nothing.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_types import SERVER_INFO_META_KEY

from apps.core.ids import project_id
from apps.runs.models import Interrupt, InterruptKind, Run, RunStatus
from apps.runs.wire import wire_timestamp

SERVER_NAME = "openwop-host"
SERVER_VERSION = "0.1.0"
RUN_ID_META_KEY = "dev.openwop/runId"
TASK_POLL_INTERVAL_MS = 1000

_PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean"})

TASK_STATUS_BY_RUN_STATUS: dict[str, str] = {
    RunStatus.PENDING: "working",
    RunStatus.RUNNING: "working",
    RunStatus.CANCELLING: "working",
    RunStatus.WAITING_EXTERNAL: "working",  # reference (i) 10: not input_required
    RunStatus.WAITING_APPROVAL: "input_required",
    RunStatus.WAITING_INPUT: "input_required",
    RunStatus.COMPLETED: "completed",
    RunStatus.FAILED: "completed",  # a failed run is a tool error, not a JSON-RPC one
    RunStatus.CANCELLED: "cancelled",
}


def server_meta(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {SERVER_INFO_META_KEY: {"name": SERVER_NAME, "version": SERVER_VERSION}}
    if extra:
        meta.update(extra)
    return meta


def call_tool_result(run: Run) -> dict[str, Any]:
    """A terminal run as CallToolResult: completed -> isError false; failed/cancelled -> isError true."""
    if run.status == RunStatus.COMPLETED:
        outputs = run.outputs if isinstance(run.outputs, dict) else {}
        content = [{"type": "text", "text": json.dumps(outputs, sort_keys=True)}]
        structured: Any = outputs
        is_error = False
    elif run.status == RunStatus.FAILED:
        error = run.error or {"code": "internal_error", "message": "The run failed."}
        content = [{"type": "text", "text": f"The run failed: {error.get('code')}: {error.get('message')}"}]
        structured = {"error": error}
        is_error = True
    else:
        content = [{"type": "text", "text": "The run was cancelled."}]
        structured = {"cancelled": True}
        is_error = True
    return {
        "resultType": "complete",
        "content": content,
        "structuredContent": structured,
        "isError": is_error,
        "_meta": server_meta({RUN_ID_META_KEY: run.run_id}),
    }


def tool_error_result(message: str) -> dict[str, Any]:
    return {
        "resultType": "complete",
        "content": [{"type": "text", "text": message}],
        "isError": True,
        "_meta": server_meta(),
    }


def form_schema(resume_schema: dict[str, Any]) -> dict[str, Any] | None:
    """The resume schema as a form `requestedSchema`, or None when it is not a flat object of
    non-secret primitives (a.6: form mode only then; never a form fallback for the rest)."""
    if resume_schema.get("type") != "object":
        return None
    properties = resume_schema.get("properties") or {}
    if not isinstance(properties, dict) or not properties:
        return None
    for prop in properties.values():
        if not isinstance(prop, dict) or prop.get("type") not in _PRIMITIVE_TYPES:
            return None
        if prop.get("writeOnly") or prop.get("format") == "password":
            return None
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if resume_schema.get("required"):
        schema["required"] = list(resume_schema["required"])
    return schema


def input_request(interrupt: Interrupt, *, form: bool, url: bool) -> dict[str, Any] | None:
    """The elicitation for one interrupt, or None when the client declared no mode that fits."""
    payload = interrupt.payload or {}
    data = payload.get("data") or {}
    if interrupt.kind == InterruptKind.CREDENTIAL:
        if not url or not data.get("connectUrl"):
            return None
        message = f"Connect your {data.get('provider', 'account')} account to continue."
        params = {"mode": "url", "message": message, "url": data["connectUrl"]}
        return {"method": "elicitation/create", "params": params}
    schema = form_schema(payload.get("resumeSchema") or {})
    if schema is None or not form:
        return None
    if interrupt.kind == InterruptKind.APPROVAL:
        message = str(data.get("title") or "Approve this run?")
    else:
        questions = data.get("questions") or []
        message = "\n".join(str(q.get("question", "")) for q in questions if isinstance(q, dict)) or "Input needed."
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


def resume_value_from(interrupt: Interrupt, response: Any) -> Any | None:
    """An ElicitResult as the interrupt's resume value; None when it carries no usable answer.

    Form `accept` -> its content (the approval value is `{"action", "comment"?}`, DESIGN.md);
    `decline`/`cancel` -> the schema's own refusal when it has one (`reject` for an approval, the
    same word for a credential); URL mode -> `{"action": <elicitation action>}`.
    """
    if not isinstance(response, dict):
        return None
    action = response.get("action")
    if action not in ("accept", "decline", "cancel"):
        return None
    schema = (interrupt.payload or {}).get("resumeSchema") or {}
    allowed = ((schema.get("properties") or {}).get("action") or {}).get("enum") or []
    if interrupt.kind == InterruptKind.CREDENTIAL:
        return {"action": action}
    if action == "accept":
        content = response.get("content")
        return content if isinstance(content, dict) else None
    if "reject" in allowed:
        return {"action": "reject"}
    if action in allowed:
        return {"action": action}
    return None


def task_doc(run: Run, *, open_interrupt: Interrupt | None, form: bool, url: bool, detailed: bool) -> dict[str, Any]:
    """The Task (CreateTaskResult) or DetailedTask (GetTaskResult) projection of a run."""
    status = TASK_STATUS_BY_RUN_STATUS[run.status]
    doc: dict[str, Any] = {
        "taskId": project_id(run.run_id),
        "status": status,
        "statusMessage": f"run {run.status}",  # content-free (map c.6 tasks.fields)
        "createdAt": wire_timestamp(run.created_at),
        "lastUpdatedAt": wire_timestamp(run.updated_at),
        "ttlMs": None,  # never failed or cancelled on a TTL
        "pollIntervalMs": TASK_POLL_INTERVAL_MS,
    }
    if not detailed:
        return doc
    if status == "input_required" and open_interrupt is not None:
        request = input_request(open_interrupt, form=form, url=url)
        if request is not None:
            doc["inputRequests"] = {open_interrupt.interrupt_id: request}
    elif status == "completed":
        doc["result"] = call_tool_result(run)
    return doc
