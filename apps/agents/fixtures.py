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




def _branch(node: dict[str, Any]) -> dict[str, Any]:
    """A node as a parallel node's branch: its kind and config (the branch has its own id)."""
    return {"kind": node["kind"], "config": node["config"]}


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
        "name": "MCP conformance: needs sampling",
        "description": "Asks the client's model; a caller that did not declare sampling is refused.",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [{"id": "ask", "kind": "sampling", "config": {"prompt": "Say hello."}}]},
    },
    "test_input_required_result_sampling": {
        "name": "MCP conformance: sampling by MRTR",
        "description": "Asks the client's model (sampling/createMessage), then completes with its answer.",
        "input_schema": _ANY_OBJECT,
        "definition": {
            "nodes": [
                {
                    "id": "capital_question",
                    "kind": "sampling",
                    "config": {"prompt": "What is the capital of France?", "maxTokens": 100},
                }
            ]
        },
    },
    "test_input_required_result_capabilities": {
        "name": "MCP conformance: asks only what was declared",
        "description": "Asks the client's model; it never sends an elicitation, which it does not need.",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [{"id": "ask", "kind": "sampling", "config": {"prompt": "Name a colour."}}]},
    },
    "test_input_required_result_list_roots": {
        "name": "MCP conformance: roots by MRTR",
        "description": "Asks the client for its roots (roots/list), then completes listing them.",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [{"id": "client_roots", "kind": "roots", "config": {}}]},
    },
    "json_schema_2020_12_tool": {
        "name": "MCP conformance: JSON Schema 2020-12",
        "description": "An inputSchema with 2020-12 keywords ($defs, $anchor, allOf, if/then/else); echoes its input.",
        "input_schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                }
            },
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"},
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": False,
        },
        "definition": {"nodes": [{"id": "echo", "kind": "echo", "config": {}}]},
    },
    "test_header_params": {
        "name": "MCP conformance: header parameters",
        "description": "region and priority are mirrored into Mcp-Param-Region / Mcp-Param-Priority (SEP-2243).",
        "input_schema": {
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "priority": {"type": "integer", "x-mcp-header": "Priority"},
                "query": {"type": "string"},
            },
            "required": ["region"],
        },
        "definition": {
            "nodes": [{"id": "route", "kind": "echo", "config": {"output": {"text": "Routed to {{region}}."}}}]
        },
    },
    "protocol_error_job": {
        "name": "MCP conformance: host fault",
        "description": "Works for a second, then faults inside the host: as a task, failed with a JSON-RPC error.",
        "input_schema": _ANY_OBJECT,
        "definition": {
            "nodes": [
                {"id": "work", "kind": "delay", "config": {"delayMs": 1000}},
                {"id": "fault", "kind": "host-fault", "config": {}},
            ]
        },
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
        "description": "Task support required: works for about a second, then fails with a tool execution error.",
        "input_schema": _ANY_OBJECT,
        "task_support": "required",
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
    "test_input_required_result_multiple_inputs": {
        "name": "MCP conformance: three questions at once",
        "description": "Asks the user's name, the client's model and its roots in one round (a parallel node), "
        "then completes with all three answers.",
        "input_schema": _ANY_OBJECT,
        "definition": {
            "nodes": [
                {
                    "id": "gather",
                    "kind": "parallel",
                    "config": {
                        "branches": [
                            {"id": "user_name", **_branch(_ask("name", "What is your name?", _NAME))},
                            {"id": "greeting", "kind": "sampling",
                             "config": {"prompt": "Generate a greeting", "maxTokens": 50}},
                            {"id": "client_roots", "kind": "roots", "config": {}},
                        ]
                    },
                }
            ]
        },
    },
    "multi_input": {
        "name": "MCP conformance: two questions at once",
        "description": "Asks two questions by form elicitation at the same time; completes once both are answered.",
        "input_schema": _ANY_OBJECT,
        "definition": {
            "nodes": [
                {
                    "id": "both",
                    "kind": "parallel",
                    "config": {
                        "branches": [
                            {"id": "first", **_branch(_ask("first", "Who signs first?", _NAME))},
                            {"id": "second", **_branch(_ask("second", "Who signs second?", _NAME))},
                        ]
                    },
                }
            ]
        },
    },
    "test_tool_with_task": {
        "name": "MCP conformance: input, then a task",
        "description": "Task support required. Asks the user's name by MRTR first; once answered it becomes a "
        "task that works for a moment, then greets them.",
        "input_schema": _ANY_OBJECT,
        "task_support": "required",
        "definition": {
            "inputBeforeTask": True,
            "nodes": [
                _ask("user_name", "What is your name?", _NAME),
                {"id": "work", "kind": "delay", "config": {"delayMs": 1500}},
                {"id": "greet", "kind": "echo", "config": {"output": {"text": "Hello, {{user_name.answers.name}}!"}}},
            ],
        },
    },
    "confirm_delete": {
        "name": "MCP conformance: confirm delete",
        "description": "Parks until the caller confirms deleting `filename`, then completes.",
        "input_schema": {"type": "object", "properties": {"filename": {"type": "string"}}},
        "definition": {"nodes": [_ask("confirm", "Delete the file?", {"confirm": {"type": "boolean"}})]},
    },
}

# Artifacts as MCP resources and rich content (issue 20), built from `artifact` nodes: each artifact
# answers a resource_link (openwop:runs/<runId>/artifacts/<artifactId>); an image/* or audio/* file
# adds image/audio content; `embed: true` adds an embedded resource (apps/mcp/projection.py).
_PNG_1X1_RED = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
_WAV_SILENCE = "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA=="  # 8 samples, 8 kHz


def _file_artifact(node_id: str, filename: str, media_type: str, data: str) -> dict[str, Any]:
    file = {"filename": filename, "mediaType": media_type, "bytes": data}
    return {"id": node_id, "kind": "artifact", "config": {"name": filename, "file": file}}


_EMBEDDED_TEXT = {
    "id": "embedded",
    "kind": "artifact",
    "config": {"name": "embedded.txt", "text": "This is an embedded resource content.", "embed": True},
}

MCP_CONTENT_FIXTURES: dict[str, dict[str, Any]] = {
    "conformance-artifact": {
        "name": "Conformance: artifact",
        "description": "Completes with one text/plain artifact holding `text`, readable as an MCP resource.",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "definition": {
            "nodes": [{"id": "artifact", "kind": "artifact", "config": {"name": "text", "text": "{{text}}"}}]
        },
    },
    "test_image_content": {
        "name": "MCP conformance: image content",
        "description": "Completes with a 1x1 red PNG artifact (image content).",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [_file_artifact("image", "red.png", "image/png", _PNG_1X1_RED)]},
    },
    "test_audio_content": {
        "name": "MCP conformance: audio content",
        "description": "Completes with a short silent WAV artifact (audio content).",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [_file_artifact("audio", "silence.wav", "audio/wav", _WAV_SILENCE)]},
    },
    "test_embedded_resource": {
        "name": "MCP conformance: embedded resource",
        "description": "Completes with a text artifact embedded in the result (resource content).",
        "input_schema": _ANY_OBJECT,
        "definition": {"nodes": [_EMBEDDED_TEXT]},
    },
    "test_multiple_content_types": {
        "name": "MCP conformance: mixed content",
        "description": "Completes with text, an image artifact and an embedded text artifact.",
        "input_schema": _ANY_OBJECT,
        "definition": {
            "nodes": [
                _file_artifact("image", "red.png", "image/png", _PNG_1X1_RED),
                _EMBEDDED_TEXT,
                {"id": "text", "kind": "echo", "config": {"output": {"text": "Text, an image and a resource."}}},
            ]
        },
    },
}

# Logging and progress on the request's own stream (issue 20): test_logging_tool, test_tool_with_progress.
MCP_STREAM_FIXTURES: dict[str, dict[str, Any]] = {
    # Instant (settled in the request): answered at once when the call asks for no log, which is
    # what `sep-2575-server-no-log-without-loglevel` times (500 ms); with logLevel its three `log`
    # nodes are three info messages on the request's stream (apps/mcp/notifications.py).
    "test_logging_tool": {
        "name": "MCP conformance: logging",
        "description": "Logs three info messages, then completes with one text output.",
        "input_schema": _ANY_OBJECT,
        "definition": {
            "nodes": [
                {"id": "started", "kind": "log", "config": {"level": "info", "message": "Tool execution started"}},
                {"id": "processing", "kind": "log", "config": {"level": "info", "message": "Tool processing data"}},
                {"id": "completed", "kind": "log", "config": {"level": "info", "message": "Tool execution completed"}},
                {"id": "text", "kind": "echo", "config": {"output": {"text": "Logging test completed."}}},
            ]
        },
    },
    # Three nodes, so three node completions: progress 1/3, 2/3, 3/3 (`tools-call-with-progress`
    # wants at least three, increasing). Its waits (delayMs, default 50) run in a worker, so the
    # progress is reported as the run advances.
    "test_tool_with_progress": {
        "name": "MCP conformance: progress",
        "description": "Two steps of delayMs milliseconds (default 50), then completes with one text output.",
        "input_schema": {
            "type": "object",
            "properties": {"delayMs": {"type": "integer", "minimum": 0, "maximum": 600000}},
        },
        "definition": {
            "nodes": [
                {"id": "step-1", "kind": "delay", "config": {"delayMs": 50, "delayMsInput": "delayMs"}},
                {"id": "step-2", "kind": "delay", "config": {"delayMs": 50, "delayMsInput": "delayMs"}},
                {"id": "text", "kind": "echo", "config": {"output": {"text": "Progress test completed."}}},
            ]
        },
    },
}

FIXTURE_WORKFLOWS.update(MCP_CONFORMANCE_FIXTURES)
FIXTURE_WORKFLOWS.update(MCP_CONTENT_FIXTURES)
FIXTURE_WORKFLOWS.update(MCP_STREAM_FIXTURES)


def fixture_workflow_ids() -> list[str]:
    return sorted(FIXTURE_WORKFLOWS)
