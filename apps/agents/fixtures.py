"""The fixture workflows every tenant gets (DESIGN.md "Contracts"; discovery `fixtures[]`)."""

from __future__ import annotations

from typing import Any

_ANY_OBJECT: dict[str, Any] = {"type": "object"}

FIXTURE_WORKFLOWS: dict[str, dict[str, Any]] = {
    "conformance-noop": {
        "name": "Conformance: no-op",
        "description": "Completes at once with empty outputs.",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [{"id": "noop", "kind": "echo", "config": {"output": {}}}]},
    },
    "conformance-failure": {
        "name": "Conformance: failure",
        "description": "Fails at once with the error code conformance_failure.",
        "input_schema": _ANY_OBJECT,
        "definition": {
            "nodes": [
                {
                    "id": "fail",
                    "kind": "fail",
                    "config": {"code": "conformance_failure", "message": "This fixture fails by design."},
                }
            ]
        },
    },
    "conformance-delay": {
        "name": "Conformance: delay",
        "description": "Waits delayMs milliseconds (input, default 1000), then completes.",
        "input_schema": {
            "type": "object",
            "properties": {"delayMs": {"type": "integer", "minimum": 0, "maximum": 600000}},
        },
        "definition": {
            "nodes": [{"id": "delay", "kind": "delay", "config": {"delayMs": 1000, "delayMsInput": "delayMs"}}]
        },
    },
    "conformance-cancellable": {
        "name": "Conformance: cancellable",
        "description": "Waits up to two minutes (input waitMs) and ends promptly when cancelled.",
        "input_schema": {
            "type": "object",
            "properties": {"waitMs": {"type": "integer", "minimum": 0, "maximum": 3600000}},
        },
        "definition": {"nodes": [{"id": "wait", "kind": "cancellable", "config": {"waitMs": 120000}}]},
    },
    "conformance-approval": {
        "name": "Conformance: approval",
        "description": "Suspends at an approval gate; accept completes the run, reject fails it.",
        "input_schema": _ANY_OBJECT,
        "definition": {
            "nodes": [
                {
                    "id": "approve",
                    "kind": "approval",
                    "config": {"title": "Approve the conformance run?", "onReject": "fail"},
                }
            ]
        },
    },
    "conformance-credential": {
        "name": "Conformance: credential",
        "description": "Suspends on a credential interrupt for the conformance provider.",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [{"id": "connect", "kind": "credential", "config": {"provider": "conformance"}}]},
    },
    # The A2A TCK fixture agent (apps/a2a/tck.py): plays the TCK scenario named by `scenario`.
    "a2a-tck": {
        "name": "A2A TCK fixture agent",
        "description": "Plays the A2A TCK scenario its input names; A2A messages whose messageId starts with "
        "tck- and name no skill are routed here.",
        "input_schema": {"type": "object", "properties": {"scenario": {"type": "string"}, "text": {"type": "string"}}},
        "definition": {"nodes": [{"id": "scenario", "kind": "a2a-tck", "config": {}}]},
    },
    "echo": {
        "name": "Echo",
        "description": "Completes with its inputs as outputs.",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [{"id": "echo", "kind": "echo", "config": {}}]},
    },
}




def _ask(node_id: str, question: str, properties: dict[str, Any]) -> dict[str, Any]:
    """An input node whose answer is a flat form (so MCP can ask it by form elicitation)."""
    return {
        "id": node_id,
        "kind": "input",
        "config": {
            "questions": [{"id": node_id, "question": question}],
            "resumeSchema": {"type": "object", "properties": properties, "required": sorted(properties)},
        },
    }


_NAME = {"name": {"type": "string"}}
_OK = {"ok": {"type": "boolean"}}

# The tools `@modelcontextprotocol/conformance` (server mode, 2026-07-28) calls by name, built from
# the node kinds above so each behaves as the suite expects of a real tool (scripts/mcp-conformance.sh).
# Only those the host can honestly serve: no sampling, roots, progress, logging or rich content.
MCP_CONFORMANCE_FIXTURES: dict[str, dict[str, Any]] = {
    "test_simple_text": {
        "name": "MCP conformance: simple text",
        "description": "Completes with one text output.",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [{"id": "text", "kind": "echo", "config": {"output": {"text": "Simple text."}}}]},
    },
    "test_error_handling": {
        "name": "MCP conformance: tool error",
        "description": "Fails at once: a tool execution error (isError), never a protocol error.",
        "input_schema": _ANY_OBJECT,
        "definition": {
            "nodes": [{"id": "fail", "kind": "fail", "config": {"code": "tool_error", "message": "Failed by design."}}]
        },
    },
    "test_missing_capability": {
        "name": "MCP conformance: needs elicitation",
        "description": "Asks a question by form elicitation; a caller that did not declare it is refused.",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [_ask("name", "What is your name?", _NAME)]},
    },
    "test_streaming_elicitation": {
        "name": "MCP conformance: elicitation on the request",
        "description": "Asks a question by form elicitation, answered on the same request (MRTR).",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [_ask("name", "What is your name?", _NAME)]},
    },
    "test_input_required_result_elicitation": {
        "name": "MCP conformance: input required",
        "description": "One round of form elicitation, then completes with the answer.",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [_ask("name", "What is your name?", _NAME)]},
    },
    "test_input_required_result_request_state": {
        "name": "MCP conformance: requestState",
        "description": "One round of form elicitation whose retry must carry the requestState.",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [_ask("ok", "Go on?", _OK)]},
    },
    "test_input_required_result_tampered_state": {
        "name": "MCP conformance: tampered requestState",
        "description": "One round of form elicitation; a retry with an altered requestState is refused.",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [_ask("ok", "Go on?", _OK)]},
    },
    "test_input_required_result_multi_round": {
        "name": "MCP conformance: two rounds",
        "description": "Two rounds of form elicitation, then completes with both answers.",
        "input_schema": _ANY_OBJECT,
        "definition": {
            "nodes": [
                _ask("name", "What is your name?", _NAME),
                _ask("color", "Which colour?", {"color": {"type": "string"}}),
            ]
        },
    },
    "greet": {
        "name": "MCP conformance: greet",
        "description": "Completes with a greeting for `name`.",
        "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        "definition": {"nodes": [{"id": "greet", "kind": "echo", "config": {"output": {"text": "Hello, {{name}}!"}}}]},
    },
    "failing_job": {
        "name": "MCP conformance: failing job",
        "description": "Works for about a second, then fails with a tool execution error.",
        "input_schema": _ANY_OBJECT,
        "definition": {
            "nodes": [
                {"id": "work", "kind": "delay", "config": {"delayMs": 1000}},
                {"id": "fail", "kind": "fail", "config": {"code": "job_failed", "message": "The job failed."}},
            ]
        },
    },
    "slow_compute": {
        "name": "MCP conformance: slow compute",
        "description": "Sleeps `seconds` (0 to 600), then returns a result; cancelled while it sleeps if asked.",
        "input_schema": {
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 600}, "label": {"type": "string"}},
            "required": ["seconds"],
        },
        "definition": {
            "nodes": [
                {"id": "compute", "kind": "delay", "config": {"secondsInput": "seconds"}},
                {
                    "id": "result",
                    "kind": "echo",
                    "config": {"output": {"text": "Computed after {{seconds}} s.", "label": "{{label}}"}},
                },
            ]
        },
    },
    "confirm_delete": {
        "name": "MCP conformance: confirm delete",
        "description": "Parks until the caller confirms deleting `filename`, then completes.",
        "input_schema": {"type": "object", "properties": {"filename": {"type": "string"}}},
        "definition": {"nodes": [_ask("confirm", "Delete the file?", {"confirm": {"type": "boolean"}})]},
    },
}

# Artifacts as MCP resources and rich content (issue 20): conformance-artifact, test_image_content, ...
MCP_CONTENT_FIXTURES: dict[str, dict[str, Any]] = {}

# Logging and progress on the request's own stream (issue 20): test_logging_tool, test_tool_with_progress.
MCP_STREAM_FIXTURES: dict[str, dict[str, Any]] = {}

FIXTURE_WORKFLOWS.update(MCP_CONFORMANCE_FIXTURES)
FIXTURE_WORKFLOWS.update(MCP_CONTENT_FIXTURES)
FIXTURE_WORKFLOWS.update(MCP_STREAM_FIXTURES)


def fixture_workflow_ids() -> list[str]:
    return sorted(FIXTURE_WORKFLOWS)
