"""Node kinds that ask the MCP client itself: sampling (`sampling/createMessage`) and roots
(`roots/list`), carried as MRTR `inputRequests` (interop map, mrtr row "sampling/createMessage |
roots/list in inputRequests": honoured only when the request declared the capability).

Each suspends on a clarification interrupt whose payload names the client request; the MCP door
(apps/mcp/projection.py `input_request`) asks it, and the client's result is the resume value.
Another door may resolve it too, with a value of the same shape. The host never runs a model
here: the sampling answer is the client's, so it is data, never authority.
"""

from __future__ import annotations

from typing import Any, ClassVar

from apps.runs.models import InterruptKind
from apps.runs.nodes import Completed, NodeContext, NodeKind, NodeResult, Suspended, register_node_kind, render_config

SAMPLING_RESUME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "role": {"type": "string"},
        "content": {"type": "object", "properties": {"type": {"type": "string"}}, "required": ["type"]},
        "model": {"type": "string"},
        "stopReason": {"type": "string"},
    },
    "required": ["content"],
}

ROOTS_RESUME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "roots": {
            "type": "array",
            "items": {"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]},
        }
    },
    "required": ["roots"],
}


@register_node_kind
class SamplingNode(NodeKind):
    """Asks the client's model: `prompt` (with `{{input}}` placeholders) as one user message.
    Completes with `{text, model}`: the text of the client's answer."""

    kind = "sampling"
    inline_safe = True
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "minLength": 1},
            "systemPrompt": {"type": "string"},
            "maxTokens": {"type": "integer", "minimum": 1, "maximum": 100000},
        },
        "required": ["prompt"],
        "additionalProperties": False,
    }

    def execute(self, ctx: NodeContext) -> NodeResult:
        if not ctx.resolved:
            request: dict[str, Any] = {
                "messages": [
                    {
                        "role": "user",
                        "content": {"type": "text", "text": render_config(ctx.config["prompt"], ctx.inputs)},
                    }
                ],
                "maxTokens": ctx.config.get("maxTokens", 256),
            }
            if "systemPrompt" in ctx.config:
                request["systemPrompt"] = ctx.config["systemPrompt"]
            return Suspended(
                kind=InterruptKind.CLARIFICATION, data={"sampling": request}, resume_schema=SAMPLING_RESUME_SCHEMA
            )
        content = ctx.resume_value["content"]
        text = content.get("text") if isinstance(content, dict) and content.get("type") == "text" else None
        outputs: dict[str, Any] = {"text": text if isinstance(text, str) else ""}
        if isinstance(ctx.resume_value.get("model"), str):
            outputs["model"] = ctx.resume_value["model"]
        return Completed(outputs=outputs)


@register_node_kind
class RootsNode(NodeKind):
    """Asks the client for its roots; completes with `{roots, text}` (text lists their URIs)."""

    kind = "roots"
    inline_safe = True
    config_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False}

    def execute(self, ctx: NodeContext) -> NodeResult:
        if not ctx.resolved:
            return Suspended(kind=InterruptKind.CLARIFICATION, data={"roots": {}}, resume_schema=ROOTS_RESUME_SCHEMA)
        roots = [root for root in ctx.resume_value["roots"] if isinstance(root, dict)]
        uris = ", ".join(str(root.get("uri")) for root in roots)
        return Completed(outputs={"roots": roots, "text": f"Client roots: {uris}" if roots else "No client roots."})


# The kinds above, by the client capability each needs (apps/mcp/tools.py refuses without it).
CLIENT_CAPABILITY_BY_KIND: dict[str, str] = {"sampling": "sampling", "roots": "roots"}


class HostFault(RuntimeError):
    """Raised by the `host-fault` node: the engine fails its run with `internal_error`."""


@register_node_kind
class HostFaultNode(NodeKind):
    """Raises, as a host defect would: the run fails with `internal_error` (apps/runs/engine.py),
    which an MCP task reports as `failed` with a JSON-RPC error (the suite's `protocol_error_job`).
    A conformance fixture's node; nothing else needs it."""

    kind = "host-fault"
    inline_safe = True
    config_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False}

    def execute(self, ctx: NodeContext) -> NodeResult:
        raise HostFault(f"node {ctx.node_id} faults by design")
