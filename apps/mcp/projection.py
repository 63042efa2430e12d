"""Runs and interrupts as MCP wire objects (interop map c.6): CallToolResult, InputRequests, Task,
and run artifacts as MCP resources and content.

Pure functions of rows already read; nothing here writes, so `tasks/get` appends nothing.

An artifact (`artifact.created`, apps/runs/steps.py) is the resource
`openwop:runs/<runId>/artifacts/<artifactId>`, both ids projected (`apps.core.ids.project_id`). In
a CallToolResult every artifact answers one `resource_link` to that URI; a file part of type
`image/*` or `audio/*` adds an `image` / `audio` item carrying its bytes; an artifact whose node
sets `embed: true` adds its contents as an embedded `resource` item (what `resources/read` gives).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_types import SERVER_INFO_META_KEY
from mcp_types.jsonrpc import INTERNAL_ERROR

from apps.core.ids import project_id
from apps.runs.models import InterruptKind, Run, RunStatus
from apps.runs.reads import OpenInterrupt, RunRow, RunSnapshot
from apps.runs.wire import wire_timestamp
from openwop_host import __version__

SERVER_NAME = "openwop-host"
SERVER_VERSION = __version__
RUN_ID_META_KEY = "dev.openwop/runId"
TASK_POLL_INTERVAL_MS = 1000
HOST_FAULT_CODE = "internal_error"  # apps/runs/engine.py: a node raised

_PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean"})

ARTIFACT_URI_SCHEME = "openwop"
ARTIFACT_URI_TEMPLATE = "openwop:runs/{runId}/artifacts/{artifactId}"
# The node kinds that emit `artifact.created`: a run whose definition has none has no artifact,
# so its CallToolResult costs no read of its events (the lean tools/call path stays one write).
ARTIFACT_NODE_KINDS = frozenset({"artifact", "a2a-tck"})

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


# What the projections read a run from: a `Run` as its creation committed it, or the row of a
# snapshot (apps/runs/reads.py).
RunView = Run | RunRow


def server_meta(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {SERVER_INFO_META_KEY: {"name": SERVER_NAME, "version": SERVER_VERSION}}
    if extra:
        meta.update(extra)
    return meta


def private_result(ttl_ms: int, **fields: Any) -> dict[str, Any]:
    """A list or read result: it depends on the caller, so it is cacheable privately (SEP-2549)."""
    return {"resultType": "complete", **fields, "ttlMs": ttl_ms, "cacheScope": "private", "_meta": server_meta()}


@dataclass(frozen=True, slots=True)
class RunArtifact:
    """One `artifact.created` of a run: its payload `{artifactId, name, parts}` and the node that
    emitted it (whose config says whether a CallToolResult embeds it)."""

    run_id: str
    node_id: str
    artifact_id: str
    name: str
    parts: list[dict[str, Any]]

    @classmethod
    def of(cls, *, run_id: str, node_id: str, payload: Mapping[str, Any]) -> RunArtifact:
        parts = payload.get("parts")
        return cls(
            run_id=run_id,
            node_id=node_id,
            artifact_id=str(payload.get("artifactId", "")),
            name=str(payload.get("name") or payload.get("artifactId", "")),
            parts=[p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else [],
        )

    @property
    def uri(self) -> str:
        return f"{ARTIFACT_URI_SCHEME}:runs/{project_id(self.run_id)}/artifacts/{project_id(self.artifact_id)}"


def _nodes(definition: Any) -> list[dict[str, Any]]:
    nodes = definition.get("nodes") if isinstance(definition, dict) else None
    return [node for node in nodes if isinstance(node, dict)] if isinstance(nodes, list) else []


def definition_emits_artifacts(definition: Any) -> bool:
    return any(node.get("kind") in ARTIFACT_NODE_KINDS for node in _nodes(definition))


def embedded_node_ids(definition: Any) -> frozenset[str]:
    """The artifact nodes whose config asks to be embedded in a CallToolResult (`embed: true`)."""
    return frozenset(
        str(node.get("id"))
        for node in _nodes(definition)
        if isinstance(node.get("config"), dict) and node["config"].get("embed") is True
    )


def part_resource_contents(uri: str, part: Mapping[str, Any]) -> dict[str, Any] | None:
    """An A2A Part as MCP ResourceContents: text -> `text` (text/plain), data -> `text` as JSON
    (application/json), a file -> `blob` (its base64 bytes) with its media type. None: a part
    with nothing to read here (a URL part)."""
    if "text" in part:
        text = part["text"]
        if not isinstance(text, str):
            text = json.dumps(text, sort_keys=True)
        return {"uri": uri, "mimeType": part.get("mediaType") or "text/plain", "text": text}
    if "data" in part:
        return {"uri": uri, "mimeType": "application/json", "text": json.dumps(part["data"], sort_keys=True)}
    if isinstance(part.get("raw"), str):
        return {"uri": uri, "mimeType": part.get("mediaType") or "application/octet-stream", "blob": part["raw"]}
    return None


def artifact_resource_contents(artifact: RunArtifact) -> list[dict[str, Any]]:
    uri = artifact.uri
    return [c for c in (part_resource_contents(uri, part) for part in artifact.parts) if c is not None]


def artifact_resource_doc(artifact: RunArtifact) -> dict[str, Any]:
    """The artifact as an MCP Resource (resources/list) and, typed, as a `resource_link`."""
    doc: dict[str, Any] = {
        "uri": artifact.uri,
        "name": artifact.name,
        "description": f"Artifact {artifact.name!r} of run {project_id(artifact.run_id)}",
    }
    contents = artifact_resource_contents(artifact)
    if len(contents) == 1:
        doc["mimeType"] = contents[0]["mimeType"]
    return doc


def artifact_content(artifact: RunArtifact, *, embed: bool) -> list[dict[str, Any]]:
    """The content items one artifact adds to a CallToolResult (module docstring)."""
    items: list[dict[str, Any]] = [{"type": "resource_link", **artifact_resource_doc(artifact)}]
    for part in artifact.parts:
        media = part.get("mediaType")
        if isinstance(part.get("raw"), str) and isinstance(media, str):
            kind = media.split("/", 1)[0].lower()
            if kind in ("image", "audio"):
                items.append({"type": kind, "data": part["raw"], "mimeType": media})
    if embed:
        items.extend({"type": "resource", "resource": contents} for contents in artifact_resource_contents(artifact))
    return items


def artifacts_of(snapshot: RunSnapshot) -> list[RunArtifact]:
    """The artifacts a snapshot read, in order."""
    run_id = snapshot.run.run_id
    return [RunArtifact.of(run_id=run_id, node_id=a.node_id, payload=a.payload) for a in snapshot.artifacts]


def snapshot_tool_result(snapshot: RunSnapshot) -> dict[str, Any]:
    """A terminal run's CallToolResult from its snapshot (read with its definition)."""
    return call_tool_result(snapshot.run, artifacts_of(snapshot), definition=snapshot.definition)


def call_tool_result(run: RunView, artifacts: Sequence[RunArtifact] = (), *, definition: Any = None) -> dict[str, Any]:
    """A terminal run as CallToolResult: completed -> isError false; failed/cancelled -> isError true.

    `artifacts`: the run's, in order; each adds its items after the text item, whatever the
    outcome (an artifact made before a failure is still the run's); `definition`, the run's, says
    which of them are embedded (needed only with artifacts)."""
    if run.status == RunStatus.COMPLETED:
        outputs = run.outputs if isinstance(run.outputs, dict) else {}
        # A string `text` output is the run's answer in words: it is the text item, as a human (and
        # the conformance suite's `greet`) reads it; otherwise the outputs as JSON. Either way the
        # outputs themselves are the structuredContent.
        text = outputs.get("text")
        content: list[dict[str, Any]] = [
            {"type": "text", "text": text if isinstance(text, str) else json.dumps(outputs, sort_keys=True)}
        ]
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
    if artifacts:
        embedded = embedded_node_ids(definition)
        for artifact in artifacts:
            content.extend(artifact_content(artifact, embed=artifact.node_id in embedded))
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


# Interrupt payload keys of apps/mcp/client_nodes.py, and the client request each one asks.
_CLIENT_REQUESTS: dict[str, str] = {"sampling": "sampling/createMessage", "roots": "roots/list"}


def input_request(
    interrupt: OpenInterrupt, *, form: bool, url: bool, client: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The client request for one interrupt (an elicitation, or the sampling / roots request of
    apps/mcp/client_nodes.py when `client`, the declared capabilities, names that capability), or
    None when the client declared nothing that fits."""
    payload = interrupt.payload or {}
    data = payload.get("data") or {}
    for key, method in _CLIENT_REQUESTS.items():
        if key in data:
            if not isinstance((client or {}).get(key), dict):
                return None
            return {"method": method, "params": dict(data[key])}
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


def input_requests(
    interrupts: Sequence[OpenInterrupt], *, form: bool, url: bool, client: Mapping[str, Any] | None = None
) -> dict[str, dict[str, Any]] | None:
    """The `inputRequests` map for every open interrupt, keyed by interruptId; None when any one
    of them cannot be asked of this client (the run cannot go on without it)."""
    requests: dict[str, dict[str, Any]] = {}
    for interrupt in interrupts:
        request = input_request(interrupt, form=form, url=url, client=client)
        if request is None:
            return None
        requests[interrupt.interrupt_id] = request
    return requests


def resume_value_from(interrupt: OpenInterrupt, response: Any) -> Any | None:
    """An ElicitResult as the interrupt's resume value; None when it carries no usable answer.

    Form `accept` -> its content (the approval value is `{"action", "comment"?}`, DESIGN.md);
    `decline`/`cancel` -> the schema's own refusal when it has one (`reject` for an approval, the
    same word for a credential); URL mode -> `{"action": <elicitation action>}`.
    """
    if not isinstance(response, dict):
        return None
    data = (interrupt.payload or {}).get("data") or {}
    if any(key in data for key in _CLIENT_REQUESTS):
        return response  # a CreateMessageResult / ListRootsResult: the node's resume schema judges it
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


def answers_of(open_interrupts: Sequence[OpenInterrupt], responses: Any) -> dict[str, Any]:
    """The resume values `inputResponses` gives a run's open interrupts (its snapshot's), by
    interrupt key: keys naming nothing open on the run are ignored (SEP-2663), and so is a
    response with no usable answer (the interrupt stays open)."""
    if not isinstance(responses, Mapping):
        return {}
    answers: dict[str, Any] = {}
    for interrupt in open_interrupts:
        if interrupt.interrupt_id not in responses:
            continue
        value = resume_value_from(interrupt, responses[interrupt.interrupt_id])
        if value is not None:
            answers[interrupt.node_id] = value
    return answers


def task_doc(
    run: RunView,
    *,
    open_interrupts: Sequence[OpenInterrupt],
    form: bool,
    url: bool,
    detailed: bool,
    ttl_ms: int | None,
    artifacts: Sequence[RunArtifact] = (),
    definition: Any = None,
    client: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Task (CreateTaskResult) or DetailedTask (GetTaskResult) projection of a run; `artifacts`
    (the run's) go into a completed task's result; `client`: the declared capabilities;
    `open_interrupts`: what an input_required task waits on (several at once for a parallel node),
    each an entry of `inputRequests` keyed by its interruptId.

    A run the host itself failed (`internal_error`: a node raised, not the workflow's own failure)
    is the task status `failed` with a JSON-RPC error, the one case the map reserves it for; every
    other failed run is `completed` with a CallToolResult isError true."""
    host_fault = run.status == RunStatus.FAILED and (run.error or {}).get("code") == HOST_FAULT_CODE
    status = "failed" if host_fault else TASK_STATUS_BY_RUN_STATUS[run.status]
    doc: dict[str, Any] = {
        "taskId": project_id(run.run_id),
        "status": status,
        "statusMessage": f"run {run.status}",  # content-free (map c.6 tasks.fields)
        "createdAt": wire_timestamp(run.created_at),
        "lastUpdatedAt": wire_timestamp(run.updated_at),
        "ttlMs": ttl_ms,  # the run retention (apps/retention run_ttl_ms); never failed or cancelled on a TTL
        "pollIntervalMs": TASK_POLL_INTERVAL_MS,
    }
    if not detailed:
        return doc
    if status == "input_required" and open_interrupts:
        requests = input_requests(open_interrupts, form=form, url=url, client=client)
        if requests:
            doc["inputRequests"] = requests
    elif status == "failed":
        doc["error"] = {"code": INTERNAL_ERROR, "message": "Internal error"}
    elif status == "completed":
        doc["result"] = call_tool_result(run, artifacts, definition=definition)
    return doc
