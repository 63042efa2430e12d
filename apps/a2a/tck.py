"""The A2A TCK fixture agent: the host's side of the TCK's scenario prefixes.

The A2A TCK (a2aproject/a2a-tck, branch 1.0-dev, `scenarios/*.feature`) drives a system under test
through the prefix of each message's `messageId` (`tck-complete-task-<session>`,
`tck-artifact-text-<session>`, ...) and names no skill. Here that is one fixture workflow,
`a2a-tck` (apps/agents/fixtures.py, seeded for every tenant and routed on the card like every
fixture), whose single node of kind `a2a-tck` plays the scenario named by its `scenario` input.

Routing (`tck_route`): a message that names no skill and whose messageId starts with `tck-` (or is
the TCK's resubscribe id) starts `a2a-tck` with `{"scenario": <the longest known prefix>, "text":
...}` instead of the host's default skill, while the `a2a-tck` route is enabled. An operator who
disables that route in the admin turns the rule off; naming a skill always wins.

Where a scenario asks for what the interop map forbids, the map wins (interop.md): a SendMessage
without taskId always starts a run and answers its Task, so `tck-message-response` completes a
task carrying the text as an artifact instead of answering a bare Message; the forward task-state
projection has no REJECTED row, so `tck-reject-task` fails the run (TASK_STATE_FAILED, error code
`rejected`). Chunked artifacts (`tck-stream-artifact-chunked`) are one artifact here: the run log
has no append/lastChunk notion, so both chunks arrive as one text part.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any, ClassVar

from a2a.types import Message

from apps.core.ids import mint_opaque
from apps.runs.models import InterruptKind
from apps.runs.nodes import (
    Artifact,
    Completed,
    Failed,
    NodeContext,
    NodeKind,
    NodeResult,
    Suspended,
    clock_wait,
    register_node_kind,
)

TCK_WORKFLOW_ID = "a2a-tck"
TCK_NODE_KIND = "a2a-tck"
RESUBSCRIBE_MESSAGE_ID = "test-resubscribe-message-id"
DEFAULT_SCENARIO = "tck-complete-task"
# A stream scenario waits this long before finishing, so a SendStreamingMessage sees WORKING
# before the artifact and the terminal status (the TCK's expected event order).
STREAM_STEP_MS = 500
# `test-resubscribe-message-id` stays WORKING for 2x the TCK's default streaming timeout (2 s).
RESUBSCRIBE_WORKING_MS = 4000

_FILE_BYTES = base64.b64encode(b"TCK file artifact content\n").decode()
_TEXT_FILE = {"filename": "output.txt", "mediaType": "text/plain"}

# scenario -> (artifact parts or None, stream step wait in ms). Order does not matter: the longest
# matching prefix wins (`tck-artifact-file-url` before `tck-artifact-file`).
_COMPLETIONS: dict[str, tuple[list[dict[str, Any]] | None, int]] = {
    "tck-complete-task": ([{"text": "Hello from TCK"}], 0),
    "tck-artifact-text": ([{"text": "Generated text content"}], 0),
    "tck-artifact-file": ([{"raw": _FILE_BYTES, **_TEXT_FILE}], 0),
    "tck-artifact-file-url": ([{"url": "https://example.com/output.txt", **_TEXT_FILE}], 0),
    "tck-artifact-data": ([{"data": {"key": "value", "count": 42}}], 0),
    "tck-message-response": ([{"text": "Direct message response"}], 0),
    "tck-stream-001": ([{"text": "Stream hello from TCK"}], STREAM_STEP_MS),
    "tck-stream-002": (None, STREAM_STEP_MS),
    "tck-stream-003": ([{"text": "Stream task lifecycle"}], STREAM_STEP_MS),
    "tck-stream-ordering-001": ([{"text": "Ordered output"}], STREAM_STEP_MS),
    "tck-stream-artifact-text": ([{"text": "Streamed text content"}], STREAM_STEP_MS),
    "tck-stream-artifact-file": ([{"raw": _FILE_BYTES, **_TEXT_FILE}], STREAM_STEP_MS),
    "tck-stream-artifact-chunked": ([{"text": "chunk-1 chunk-2"}], STREAM_STEP_MS),
    RESUBSCRIBE_MESSAGE_ID: (None, RESUBSCRIBE_WORKING_MS),
}
TCK_SCENARIOS: tuple[str, ...] = (*_COMPLETIONS, "tck-input-required", "tck-reject-task")


def tck_scenario(message_id: str) -> str | None:
    """The scenario a TCK messageId names (longest known prefix); an unknown `tck-` prefix is the
    default completion (the TCK's generated SUTs complete unhandled prefixes), else None."""
    matches = [s for s in TCK_SCENARIOS if message_id.startswith(s)]
    if matches:
        return max(matches, key=len)
    return DEFAULT_SCENARIO if message_id.startswith("tck-") else None


def tck_route(message: Message, *, route_enabled: bool) -> tuple[str, dict[str, Any]] | None:
    """(workflowId, inputs) of a TCK message naming no skill, or None to route as usual."""
    scenario = tck_scenario(message.message_id) if route_enabled else None
    if scenario is None:
        return None
    text = "\n".join(part.text for part in message.parts if part.HasField("text"))
    return TCK_WORKFLOW_ID, {"scenario": scenario, "text": text}


@register_node_kind
class TckScenarioNode(NodeKind):
    """Plays one TCK scenario (module docstring); an unknown scenario completes, as in the TCK."""

    kind = TCK_NODE_KIND
    config_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False}

    def execute(self, ctx: NodeContext) -> NodeResult:
        scenario = str(ctx.inputs.get("scenario") or DEFAULT_SCENARIO)
        if scenario == "tck-reject-task":
            return Failed(code="rejected", message="rejected")
        if scenario == "tck-input-required":
            if not ctx.resolved:
                return Suspended(
                    kind=InterruptKind.CLARIFICATION,
                    data={"questions": [{"id": "input", "question": "The TCK scenario asks for input."}]},
                )
            return Completed(outputs={"scenario": scenario, "answer": ctx.resume_value})
        parts, wait_ms = _COMPLETIONS.get(scenario, _COMPLETIONS[DEFAULT_SCENARIO])
        deadline = ctx.started_at + timedelta(milliseconds=wait_ms)
        if wait_ms and (waiting := clock_wait(ctx, deadline, poll_seconds=0.1)) is not None:
            return waiting
        artifacts = (Artifact(artifact_id=mint_opaque(), name=scenario, parts=parts),) if parts else ()
        return Completed(outputs={"scenario": scenario}, artifacts=artifacts)
