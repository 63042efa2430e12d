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


def fixture_workflow_ids() -> list[str]:
    return sorted(FIXTURE_WORKFLOWS)
