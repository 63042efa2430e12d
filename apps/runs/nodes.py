"""The node kinds a workflow may use: one small class each, in one registry.

A node kind is pure with respect to the run: it reads its context and returns a result; the
engine (engine.py) turns that result into events and state in one transaction. A kind that waits
on the clock (delay, cancellable) parks the run (`clock_wait`): the worker lets it go with a
durable wake-up time and any worker executes the node again once it is due; only the last
moments of a wait (under SLEEP_BELOW) are slept in the worker thread, heartbeating the lease and
watching for a cancel. A kind that needs the outside world (approval, input, credential) suspends
the run with an interrupt, and is executed again once the interrupt is resolved, with the resume
value in hand.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.conf import settings
from django.utils import timezone

from apps.agents.definitions import node_kind_declare
from apps.core.ids import mint_opaque
from apps.runs.models import InterruptKind, RunStatus

# ---------------------------------------------------------------------------------------------
# What a node sees and what it returns


@dataclass(frozen=True)
class NodeContext:
    run_id: str
    node_id: str
    config: Mapping[str, Any]
    inputs: Mapping[str, Any]
    variables: Mapping[str, Any]  # outputs of the nodes before this one, by node id
    started_at: datetime  # the node.started timestamp: a resumed node continues from it
    heartbeat: Callable[[], None]  # renew the run's lease; raises when the lease was lost
    cancel_requested: Callable[[], bool]
    resolved: bool = False  # this node's interrupt has been resolved...
    resume_value: Any = None  # ...with this value
    heartbeat_seconds: float = 1.0
    # A parallel node's branches that have opened their interrupt, by interrupt key
    # (`<node id>.<branch id>`): (the interrupt's kind, resolved?, its resume value).
    branches: Mapping[str, tuple[str, bool, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Artifact:
    artifact_id: str
    name: str
    parts: list[dict[str, Any]]  # A2A 1.0 Part shapes: {text} | {data} | {raw, mediaType, filename}


@dataclass(frozen=True)
class Completed:
    outputs: dict[str, Any]
    artifacts: tuple[Artifact, ...] = ()


@dataclass(frozen=True)
class Failed:
    code: str
    message: str
    details: dict[str, Any] | None = None

    def as_error(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return error


@dataclass(frozen=True)
class Suspended:
    kind: InterruptKind
    data: dict[str, Any]
    resume_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})


@dataclass(frozen=True)
class SuspendedMany:
    """A parallel node waits on several interrupts at once: `opened` are the branches' new
    suspensions by interrupt key (those already open are not repeated), `waiting` the kind the run
    waits as (its first unresolved branch's)."""

    opened: tuple[tuple[str, Suspended], ...]
    waiting: InterruptKind


@dataclass(frozen=True)
class CancelObserved:
    """The node stopped early because the run is cancelling."""


@dataclass(frozen=True)
class Parked:
    """The node waits on the clock until `until`. No event: the run stays `running` at this node
    (what every door shows of a waiting node), the worker releases it, and a worker executes the
    node again from its `node.started` once `until` has passed (`Run.wake_at`)."""

    until: datetime


NodeResult = Completed | Failed | Suspended | SuspendedMany | CancelObserved | Parked

# interrupt.md: the snapshot status a suspension puts the run in. A credential interrupt waits for
# the caller (interop map: waiting-input, A2A AUTH_REQUIRED when `oauth.credentialInterrupt`).
WAITING_STATUS_BY_KIND: dict[str, RunStatus] = {
    InterruptKind.APPROVAL: RunStatus.WAITING_APPROVAL,
    InterruptKind.CLARIFICATION: RunStatus.WAITING_INPUT,
    InterruptKind.CREDENTIAL: RunStatus.WAITING_INPUT,
    InterruptKind.EXTERNAL_EVENT: RunStatus.WAITING_EXTERNAL,
}


# ---------------------------------------------------------------------------------------------
# Registry


class NodeKind(ABC):
    kind: ClassVar[str]
    config_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    # True when `execute` returns at once, with no sleep, no outside call and no heartbeat: such a
    # node may run in memory in the web process whose one transaction creates or resumes the run
    # (steps.draft_settle). A kind that waits or calls out keeps the default and is always run by a
    # Celery worker.
    inline_safe: ClassVar[bool] = False

    @abstractmethod
    def execute(self, ctx: NodeContext) -> NodeResult: ...


NODE_KINDS: dict[str, NodeKind] = {}


def register_node_kind(cls: type[NodeKind]) -> type[NodeKind]:
    """Register a kind the engine executes; it is declared to the workflow checks as well (a
    workflow naming it is accepted: apps/agents/definitions.py)."""
    node_kind_declare(cls.kind, cls.config_schema)  # raises for a kind registered twice, a bad schema
    NODE_KINDS[cls.kind] = cls()
    return cls


# ---------------------------------------------------------------------------------------------
# Waiting on the clock without holding a worker

# A wait with less than this left is slept in the worker thread: parking the run and claiming it
# again cost two transactions and a wake-up, more than so short a sleep holds the thread.
SLEEP_BELOW = timedelta(milliseconds=250)


def clock_wait(ctx: NodeContext, deadline: datetime, *, poll_seconds: float) -> NodeResult | None:
    """How a node waits for `deadline` (measured from its `node.started`, so a run resumed after a
    crash waits only what remains): None once it has passed; Parked while more than SLEEP_BELOW
    remains; otherwise the rest is slept here (CancelObserved when a cancel arrived first)."""
    remaining = deadline - timezone.now()
    if remaining <= timedelta(0):
        return None  # a parked node woken when due: no cancel to watch for, the engine checks it
    if remaining > SLEEP_BELOW:
        return Parked(until=deadline)
    return CancelObserved() if wait_until_deadline(ctx, deadline, poll_seconds=poll_seconds) else None


def wait_until_deadline(ctx: NodeContext, deadline: datetime, *, poll_seconds: float) -> bool:
    """Sleep until `deadline`; True when a cancel arrived first. Heartbeats the lease meanwhile."""
    last_beat = time.monotonic()
    while True:
        if ctx.cancel_requested():
            return True
        remaining = (deadline - timezone.now()).total_seconds()
        if remaining <= 0:
            return False
        time.sleep(min(poll_seconds, remaining))
        if time.monotonic() - last_beat >= ctx.heartbeat_seconds:
            ctx.heartbeat()
            last_beat = time.monotonic()


_TEMPLATE_WHOLE = re.compile(r"^\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}$")
_TEMPLATE_PART = re.compile(r"\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}")


def render_config(template: Any, inputs: Mapping[str, Any] | _RunScope) -> Any:
    """`{{name}}` placeholders take the run's input values (node kinds registered elsewhere fill
    their configs with it too): a whole-string placeholder keeps the value's type."""
    if isinstance(template, str):
        whole = _TEMPLATE_WHOLE.match(template)
        if whole:
            return inputs.get(whole.group(1))
        return _TEMPLATE_PART.sub(lambda m: str(inputs.get(m.group(1), "")), template)
    if isinstance(template, list):
        return [render_config(item, inputs) for item in template]
    if isinstance(template, dict):
        return {key: render_config(value, inputs) for key, value in template.items()}
    return template


def closed_object(
    properties: dict[str, Any], *, required: tuple[str, ...] = (), constraints: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A JSON Schema object with these `properties` and no other member. Its keys keep the order
    jsonschema checks them in, and so the order of `node_config_errors` (apps/agents/definitions.py)."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return {**schema, **(constraints or {}), "additionalProperties": False}


# ---------------------------------------------------------------------------------------------
# The kinds


@register_node_kind
class EchoNode(NodeKind):
    """Outputs the run inputs, or `config.output` with `{{input}}` placeholders filled in."""

    kind = "echo"
    inline_safe = True
    config_schema: ClassVar[dict[str, Any]] = closed_object({"output": {"type": "object"}})

    def execute(self, ctx: NodeContext) -> NodeResult:
        if "output" in ctx.config:
            return Completed(outputs=render_config(ctx.config["output"], _RunScope(ctx.inputs, ctx.variables)))
        return Completed(outputs=dict(ctx.inputs))


@dataclass(frozen=True)
class _RunScope:
    """What an echo template may name: an input, else an earlier node's output by dotted path
    (`{{ask.answers.name}}`: node `ask`, its output `answers`, key `name`)."""

    inputs: Mapping[str, Any]
    variables: Mapping[str, Any]

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.inputs:
            return self.inputs[name]
        value: Any = self.variables
        for part in name.split("."):
            if not isinstance(value, Mapping) or part not in value:
                return default
            value = value[part]
        return value


@register_node_kind
class DelayNode(NodeKind):
    """Waits `delayMs` (from `config.delayMsInput`'s input, else `config.delayMs`), or the number of
    seconds in `config.secondsInput`'s input (what the MCP conformance suite's `slow_compute` sends).

    The wait is measured from the node's `node.started`, so a run resumed after a worker died
    sleeps only what remains. A seconds input that is not a number from 0 to MAX_DELAY_MS / 1000 fails
    the node with a validation error (a workflow's input schema normally refuses it before the run).
    """

    kind = "delay"
    MAX_DELAY_MS = 600_000
    config_schema: ClassVar[dict[str, Any]] = closed_object(
        {
            "delayMs": {"type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS},
            "delayMsInput": {"type": "string", "minLength": 1},
            "secondsInput": {"type": "string", "minLength": 1},
        },
        constraints={"not": {"required": ["delayMsInput", "secondsInput"]}},
    )

    def execute(self, ctx: NodeContext) -> NodeResult:
        delay_ms = ctx.config.get("delayMs", 0)
        input_name = ctx.config.get("delayMsInput")
        if input_name and isinstance(ctx.inputs.get(input_name), int):
            delay_ms = ctx.inputs[input_name]
        seconds_name = ctx.config.get("secondsInput")
        if seconds_name and seconds_name in ctx.inputs:
            seconds = ctx.inputs[seconds_name]
            limit = self.MAX_DELAY_MS // 1000
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= limit:
                return Failed(
                    code="validation_error",
                    message=f"The input {seconds_name!r} is a number of seconds from 0 to {limit}.",
                )
            delay_ms = round(seconds * 1000)
        delay_ms = max(0, min(int(delay_ms), self.MAX_DELAY_MS))
        deadline = ctx.started_at + timedelta(milliseconds=delay_ms)
        if (waiting := clock_wait(ctx, deadline, poll_seconds=0.25)) is not None:
            return waiting
        return Completed(outputs={"delayedMs": delay_ms})


@register_node_kind
class CancellableNode(NodeKind):
    """A long wait that ends promptly when the run is cancelled: parked, the cancel ends it at once
    (services.run_cancel); in its last moments (slept), within ~100 ms."""

    kind = "cancellable"
    config_schema: ClassVar[dict[str, Any]] = closed_object(
        {"waitMs": {"type": "integer", "minimum": 0, "maximum": 3_600_000}}
    )

    def execute(self, ctx: NodeContext) -> NodeResult:
        wait_ms = int(ctx.inputs.get("waitMs", ctx.config.get("waitMs", 120_000)))
        deadline = ctx.started_at + timedelta(milliseconds=wait_ms)
        if (waiting := clock_wait(ctx, deadline, poll_seconds=0.1)) is not None:
            return waiting
        return Completed(outputs={"waitedMs": wait_ms})


@register_node_kind
class FailNode(NodeKind):
    """Fails the run with the configured error."""

    kind = "fail"
    inline_safe = True
    config_schema: ClassVar[dict[str, Any]] = closed_object(
        {
            "code": {"type": "string", "pattern": "^[a-z][a-z0-9_.-]{0,99}$"},
            "message": {"type": "string", "minLength": 1},
        },
        required=("code", "message"),
    )

    def execute(self, ctx: NodeContext) -> NodeResult:
        return Failed(code=ctx.config["code"], message=ctx.config["message"])


# DESIGN.md: the approval resume value, on every door.
APPROVAL_RESUME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["accept", "reject"]},
        "comment": {"type": "string"},
    },
    "required": ["action"],
    "additionalProperties": False,
}


@register_node_kind
class ApprovalNode(NodeKind):
    """Suspends on an approval interrupt; `accept` continues, `reject` fails the run (or, with
    `onReject: continue`, completes the node with `approved: false`)."""

    kind = "approval"
    inline_safe = True
    config_schema: ClassVar[dict[str, Any]] = closed_object(
        {
            "title": {"type": "string", "minLength": 1},
            "artifactType": {"type": "string", "minLength": 1},
            "onReject": {"enum": ["fail", "continue"]},
            # interrupt.md §Approver enforcement: only these principals may resolve; empty = anyone.
            "approversList": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 100},
        }
    )

    def execute(self, ctx: NodeContext) -> NodeResult:
        if not ctx.resolved:
            data = {
                "artifactId": ctx.node_id,
                "artifactType": ctx.config.get("artifactType", "run"),
                "title": ctx.config.get("title", "Approve this run?"),
                "actions": ["accept", "reject"],
            }
            if ctx.config.get("approversList"):
                data["approversList"] = list(ctx.config["approversList"])
            return Suspended(kind=InterruptKind.APPROVAL, data=data, resume_schema=APPROVAL_RESUME_SCHEMA)
        action = ctx.resume_value["action"]
        outputs: dict[str, Any] = {"approved": action == "accept", "action": action}
        if "comment" in ctx.resume_value:
            outputs["comment"] = ctx.resume_value["comment"]
        if action == "reject" and ctx.config.get("onReject", "fail") == "fail":
            return Failed(code="approval_rejected", message="The approval was rejected.", details=outputs)
        return Completed(outputs=outputs)


@register_node_kind
class InputNode(NodeKind):
    """Suspends on a clarification interrupt; the answer becomes `outputs.answers`."""

    kind = "input"
    inline_safe = True
    config_schema: ClassVar[dict[str, Any]] = closed_object(
        {
            "questions": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "question": {"type": "string"}, "schema": {}},
                    "required": ["id", "question"],
                },
            },
            "resumeSchema": {"type": "object"},
        },
        required=("questions",),
    )

    def execute(self, ctx: NodeContext) -> NodeResult:
        if not ctx.resolved:
            return Suspended(
                kind=InterruptKind.CLARIFICATION,
                data={"questions": list(ctx.config["questions"])},
                resume_schema=dict(ctx.config.get("resumeSchema", {"type": "object"})),
            )
        return Completed(outputs={"answers": ctx.resume_value})


CREDENTIAL_RESUME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"action": {"type": "string", "enum": ["accept", "decline", "cancel"]}},
}


@register_node_kind
class CredentialNode(NodeKind):
    """Suspends on a credential interrupt `{provider, connectUrl}` (RFC 0199); the caller connects
    the account out of band and resolves it. A declined connection fails the run."""

    kind = "credential"
    inline_safe = True
    config_schema: ClassVar[dict[str, Any]] = closed_object(
        {
            "provider": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
            "connectUrl": {"type": "string", "format": "uri"},
        },
        required=("provider",),
    )

    def execute(self, ctx: NodeContext) -> NodeResult:
        provider = ctx.config["provider"]
        if not ctx.resolved:
            connect_url = ctx.config.get(
                "connectUrl", f"{settings.OPENWOP_PUBLIC_URL}/host/openwop-host/connect/{provider}"
            )
            return Suspended(
                kind=InterruptKind.CREDENTIAL,
                data={"provider": provider, "connectUrl": connect_url},
                resume_schema=CREDENTIAL_RESUME_SCHEMA,
            )
        if ctx.resume_value.get("action") in ("decline", "cancel"):
            return Failed(code="credential_required", message=f"No {provider} credential was connected.")
        return Completed(outputs={"provider": provider, "connected": True})


@register_node_kind
class ArtifactNode(NodeKind):
    """Emits one artifact (`artifact.created`): text, data, or a file (base64 bytes).

    `embed: true` asks an MCP CallToolResult to carry the artifact's contents as an embedded
    `resource` item, besides its `resource_link` (apps/mcp/projection.py); the artifact is the same."""

    kind = "artifact"
    inline_safe = True
    config_schema: ClassVar[dict[str, Any]] = closed_object(
        {
            "name": {"type": "string", "minLength": 1},
            "text": {"type": "string"},
            "data": {},
            "file": closed_object(
                {
                    "filename": {"type": "string", "minLength": 1},
                    "mediaType": {"type": "string", "minLength": 1},
                    "bytes": {"type": "string"},
                },
                required=("filename", "mediaType", "bytes"),
            ),
            "embed": {"type": "boolean"},
        },
        required=("name",),
        constraints={"oneOf": [{"required": ["text"]}, {"required": ["data"]}, {"required": ["file"]}]},
    )

    def execute(self, ctx: NodeContext) -> NodeResult:
        config = ctx.config
        if "text" in config:
            part: dict[str, Any] = {"text": render_config(config["text"], ctx.inputs)}
        elif "data" in config:
            part = {"data": render_config(config["data"], ctx.inputs)}
        else:
            file = config["file"]
            try:
                base64.b64decode(file["bytes"], validate=True)
            except (binascii.Error, ValueError):
                return Failed(code="validation_error", message="The artifact file bytes are not base64.")
            part = {"raw": file["bytes"], "mediaType": file["mediaType"], "filename": file["filename"]}
        artifact = Artifact(artifact_id=mint_opaque(), name=config["name"], parts=[part])
        return Completed(outputs={"artifactId": artifact.artifact_id}, artifacts=(artifact,))


# Syslog severities (RFC 5424 §6.2.1), least severe first: MCP logging's `LoggingLevel`.
LOG_LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@register_node_kind
class LogNode(NodeKind):
    """Records `config.message` at `config.level` (a syslog severity) and completes at once.

    The message is the workflow author's fixed text, never rendered from the run's inputs: it is
    what a door may show a caller who asked for the run's log (MCP `notifications/message`,
    apps/mcp/notifications.py reads it from the run's definition). The node's outputs are empty."""

    kind = "log"
    inline_safe = True
    config_schema: ClassVar[dict[str, Any]] = closed_object(
        {
            "level": {"enum": list(LOG_LEVELS)},
            "message": {"type": "string", "minLength": 1, "maxLength": 1000},
        },
        required=("level", "message"),
    )

    def execute(self, ctx: NodeContext) -> NodeResult:
        return Completed(outputs={})


BRANCH_ID_PATTERN = "^[A-Za-z0-9_-]{1,40}$"


def branch_key(node_id: str, branch_id: str) -> str:
    """The interrupt key of a parallel node's branch (an Interrupt's `node_id`)."""
    return f"{node_id}.{branch_id}"


@register_node_kind
class ParallelNode(NodeKind):
    """Asks for several things at once (MCP SEP-2322: one InputRequiredResult, many inputRequests).

    Each branch is a suspending kind (approval, input, credential, sampling, roots, ...) that opens
    its own interrupt, keyed `<node id>.<branch id>`, all in the same step; the run waits until
    every one is resolved (in any order, together or one by one), then the node completes with
    each branch's outputs under its id. A branch that fails on its answer (a rejected approval)
    fails the node. Branch kinds must be instant (`inline_safe`)."""

    kind = "parallel"
    inline_safe = True
    config_schema: ClassVar[dict[str, Any]] = closed_object(
        {
            "branches": {
                "type": "array",
                "minItems": 2,
                "maxItems": 16,
                "items": closed_object(
                    {
                        "id": {"type": "string", "pattern": BRANCH_ID_PATTERN},
                        "kind": {"type": "string", "minLength": 1},
                        "config": {"type": "object"},
                    },
                    required=("id", "kind"),
                ),
            },
        },
        required=("branches",),
    )

    def execute(self, ctx: NodeContext) -> NodeResult:
        branches = list(ctx.config["branches"])
        ids = [b["id"] for b in branches]
        if len(set(ids)) != len(ids):
            return Failed(code="validation_error", message="A parallel node's branch ids must be distinct.")
        outputs: dict[str, Any] = {}
        opened: list[tuple[str, Suspended]] = []
        waiting: InterruptKind | None = None
        for branch in branches:
            kind = NODE_KINDS.get(branch["kind"])
            if kind is None or not kind.inline_safe or isinstance(kind, ParallelNode):
                return Failed(
                    code="validation_error",
                    message=f"Branch {branch['id']!r}: kind {branch['kind']!r} cannot run in a parallel node.",
                )
            key = branch_key(ctx.node_id, branch["id"])
            state = ctx.branches.get(key)
            if state is not None and not state[1]:
                waiting = waiting or InterruptKind(state[0])  # open, unanswered
                continue
            result = kind.execute(
                replace(
                    ctx,
                    node_id=key,
                    config=branch.get("config", {}),
                    resolved=state is not None,
                    resume_value=state[2] if state is not None else None,
                    branches={},
                )
            )
            if isinstance(result, Completed):
                outputs[branch["id"]] = result.outputs
            elif isinstance(result, Suspended) and state is None:
                opened.append((key, result))
                waiting = waiting or result.kind
            elif isinstance(result, Failed):
                return result
            else:
                return Failed(code="internal_error", message=f"Branch {branch['id']!r} did not settle on its answer.")
        if waiting is None:
            return Completed(outputs=outputs)
        return SuspendedMany(opened=tuple(opened), waiting=waiting)


def definition_kinds(definition: Mapping[str, Any] | None) -> set[str]:
    """Every node kind a workflow definition may run, a parallel node's branches included."""
    kinds: set[str] = set()
    for node in (definition or {}).get("nodes", []):
        if not isinstance(node, dict):
            continue
        kinds.add(str(node.get("kind")))
        config = node.get("config")
        if node.get("kind") == "parallel" and isinstance(config, dict):
            kinds.update(str(b.get("kind")) for b in config.get("branches", []) if isinstance(b, dict))
    return kinds
