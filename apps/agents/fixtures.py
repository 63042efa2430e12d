"""The fixture workflows every tenant gets (DESIGN.md "Contracts"; discovery `fixtures[]`)."""

from __future__ import annotations

from typing import Any

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


def _node(node_id: str, kind: str, **config: Any) -> dict[str, Any]:
    return {"id": node_id, "kind": kind, "config": config}


def _fixture(
    name: str,
    description: str,
    *nodes: dict[str, Any],
    input_schema: dict[str, Any] = _ANY_OBJECT,
    task_support: str | None = None,
    input_before_task: bool = False,
) -> dict[str, Any]:
    """A fixture as `workflow_fixtures_seed` stores it: its nodes run in order."""
    fixture: dict[str, Any] = {"name": name, "description": description, "input_schema": input_schema}
    if task_support is not None:
        fixture["task_support"] = task_support
    definition: dict[str, Any] = {"inputBeforeTask": True} if input_before_task else {}
    fixture["definition"] = {**definition, "nodes": list(nodes)}
    return fixture


def _text(node_id: str, text: str, **output: str) -> dict[str, Any]:
    """An echo node that completes with `text` (and `output`), `{{input}}` placeholders filled."""
    return _node(node_id, "echo", output={"text": text, **output})


# The input schema of a fixture whose waits the caller sets with `delayMs`.
_DELAY_MS_INPUT = {"type": "object", "properties": {"delayMs": {"type": "integer", "minimum": 0, "maximum": 600000}}}


FIXTURE_WORKFLOWS: dict[str, dict[str, Any]] = {
    "conformance-noop": _fixture(
        "Conformance: no-op", "Completes at once with empty outputs.", _node("noop", "echo", output={})
    ),
    "conformance-failure": _fixture(
        "Conformance: failure",
        "Fails at once with the error code conformance_failure.",
        _node("fail", "fail", code="conformance_failure", message="This fixture fails by design."),
    ),
    "conformance-delay": _fixture(
        "Conformance: delay",
        "Waits delayMs milliseconds (input, default 1000), then completes.",
        _node("delay", "delay", delayMs=1000, delayMsInput="delayMs"),
        input_schema=_DELAY_MS_INPUT,
    ),
    "conformance-cancellable": _fixture(
        "Conformance: cancellable",
        "Waits up to two minutes (input waitMs) and ends promptly when cancelled.",
        _node("wait", "cancellable", waitMs=120000),
        input_schema={
            "type": "object",
            "properties": {"waitMs": {"type": "integer", "minimum": 0, "maximum": 3600000}},
        },
    ),
    "conformance-approval": _fixture(
        "Conformance: approval",
        "Suspends at an approval gate; accept completes the run, reject fails it.",
        _node("approve", "approval", title="Approve the conformance run?", onReject="fail"),
    ),
    "conformance-credential": _fixture(
        "Conformance: credential",
        "Suspends on a credential interrupt for the conformance provider.",
        _node("connect", "credential", provider="conformance"),
    ),
    # The A2A TCK fixture agent (apps/a2a/tck.py): plays the TCK scenario named by `scenario`.
    "a2a-tck": _fixture(
        "A2A TCK fixture agent",
        "Plays the A2A TCK scenario its input names; A2A messages whose messageId starts with "
        "tck- and name no skill are routed here.",
        _node("scenario", "a2a-tck"),
        input_schema={"type": "object", "properties": {"scenario": {"type": "string"}, "text": {"type": "string"}}},
    ),
    "echo": _fixture("Echo", "Completes with its inputs as outputs.", _node("echo", "echo")),
}


def _question(node_id: str, question: str, properties: dict[str, Any]) -> dict[str, Any]:
    """A clarification node asking one question whose answer is an object of `properties`."""
    return _node(
        node_id,
        "input",
        questions=[{"id": "q1", "question": question}],
        resumeSchema={"type": "object", "properties": properties, "required": sorted(properties)},
    )


_LISTED_APPROVER = "urn:conformance:listed-approver"

# The fixtures of the OpenWOP conformance suite's contract beyond the core ones above
# (conformance/fixtures.md; scripts/openwop-conformance.sh runs the suite against them).
OPENWOP_SUITE_FIXTURES: dict[str, dict[str, Any]] = {
    # interrupt.md §Approver enforcement: only the listed principal may resolve the gate, so the
    # suite's own bearer is the non-listed resolver by construction (403 forbidden on REST,
    # nothing resolved on MCP tasks/update).
    "conformance-approval-approvers": _fixture(
        "Conformance: approval (listed approvers)",
        f"Suspends at an approval gate only {_LISTED_APPROVER} may resolve.",
        _node(
            "gate",
            "approval",
            title="Approve the conformance run (listed approvers only)?",
            onReject="fail",
            approversList=[_LISTED_APPROVER],
        ),
    ),
    # RFC 0199 §D.2: a flat primitive question is asked by MCP form elicitation; a nested or a
    # sensitive one never is (URL mode where a resolve page exists, else a tool error).
    "conformance-clarification": _fixture(
        "Conformance: clarification",
        "Suspends on one question (q1, a string); the answer completes the run.",
        _question("ask", "What colour should the conformance run use?", {"q1": {"type": "string"}}),
    ),
    "conformance-clarification-nested": _fixture(
        "Conformance: clarification (nested answer)",
        "Suspends on one question whose answer is a nested object: never a form elicitation.",
        _question(
            "ask",
            "Where should the conformance report go?",
            {"q1": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        ),
    ),
    "conformance-clarification-sensitive": _fixture(
        "Conformance: clarification (sensitive answer)",
        "Suspends on one question whose answer is a password field: never a form elicitation.",
        _question("ask", "Which passphrase unlocks the report?", {"q1": {"type": "string", "format": "password"}}),
    ),
    # RFC 0204 §A (host-services.md §mcp): one `mcp.client` node calls ctx.mcp.<method> with the run's
    # inputs on the server bound to `serverId` (`conformance`: the suite's fake MCP server,
    # `conformance-down`: an address nothing answers) and completes with outputs.result.
    "conformance-mcp-client": _fixture(
        "Conformance: ctx.mcp client",
        "Calls ctx.mcp.<method> (callTool, listTools, readResource, serverHealth; default serverHealth) on "
        "the MCP server bound to serverId (default conformance); outputs.result is the server's result.",
        _node(
            "mcp-client",
            "mcp.client",
            method="{{method}}",
            serverId="{{serverId}}",
            name="{{name}}",
            arguments="{{arguments}}",
            cursor="{{cursor}}",
            uri="{{uri}}",
            defaults={"method": "serverHealth", "serverId": "conformance"},
        ),
        input_schema={
            "type": "object",
            "properties": {
                "method": {"enum": ["callTool", "listTools", "readResource", "serverHealth"]},
                "serverId": {"type": "string", "minLength": 1},
                "name": {"type": "string"},
                "arguments": {"type": "object"},
                "cursor": {"type": "string"},
                "uri": {"type": "string"},
            },
        },
    ),
    # security-defaults.md §Onward hops: routed as the only skill of one agent's card, it sends the
    # inbound A2A message's text on to the A2A peer bound as `conformance`, re-emitting the
    # message's permittedPurposes label; `[]` means no onward call at all.
    "conformance-purpose-relay": _fixture(
        "Conformance: purpose relay",
        "Relays the inbound message's text to the A2A peer bound as conformance, with its purpose label.",
        _node("relay", "conformance.a2a-relay", peer="conformance"),
    ),
}
FIXTURE_WORKFLOWS.update(OPENWOP_SUITE_FIXTURES)


# The agents of the conformance agent pack (conformance/fixtures.md §Agent Pack Install): their
# system prompts and handoff schemas carry the suite's canaries, which no card or inventory entry
# may ever show (SR-1). Installed by `manage.py conformance_profile apply`: the resolver and the
# relay in the suite's tenant, the escalator in the second tenant only.
CONFORMANCE_AGENT_PACK = "core.conformance.agent-pack"
_PROMPT_CANARY = "OPENWOP-CONFORMANCE-CANARY-0202-PROMPT"
_HANDOFF_CANARY = "OPENWOP-CONFORMANCE-CANARY-0202-HANDOFF"


def _pack_agent(agent_id: str, persona: str, description: str, roster: list[str]) -> dict[str, Any]:
    handoff = {
        what: {"type": "object", "description": f"{_HANDOFF_CANARY} {what}", "additionalProperties": True}
        for what in ("taskSchema", "returnSchema")
    }
    return {
        "agent_id": f"{CONFORMANCE_AGENT_PACK}.{agent_id}",
        "persona": persona,
        "label": persona,
        "description": description,
        "pack_name": CONFORMANCE_AGENT_PACK,
        "pack_version": "1.0.0",
        "roster": roster,
        "system_prompt": f"You are the {agent_id}. {_PROMPT_CANARY}",
        "handoff_schemas": handoff,
    }


CONFORMANCE_PACK_AGENTS: dict[str, dict[str, Any]] = {
    "resolver": _pack_agent(
        "resolver", "Resolver", "Resolves a request by running the approval workflow.", ["conformance-approval"]
    ),
    "escalator": _pack_agent(
        "escalator", "Escalator", "Escalates a request by running the approval workflow.", ["conformance-approval"]
    ),
    "relay": _pack_agent(
        "relay",
        "Relay",
        "Relays a message to the configured peer, purpose label included.",
        ["conformance-purpose-relay"],
    ),
}


def _ask(node_id: str, question: str, properties: dict[str, Any]) -> dict[str, Any]:
    """An input node whose answer is a flat form (so MCP can ask it by form elicitation)."""
    return _node(
        node_id,
        "input",
        questions=[{"id": node_id, "question": question}],
        resumeSchema={"type": "object", "properties": properties, "required": sorted(properties)},
    )


_NAME = {"name": {"type": "string"}}
_OK = {"ok": {"type": "boolean"}}

# The tools `@modelcontextprotocol/conformance` (server mode, 2026-07-28) calls by name, built from
# the node kinds above so each behaves as the suite expects of a real tool (scripts/mcp-conformance.sh).
MCP_CONFORMANCE_FIXTURES: dict[str, dict[str, Any]] = {
    "test_simple_text": _fixture(
        "MCP conformance: simple text", "Completes with one text output.", _text("text", "Simple text.")
    ),
    "test_error_handling": _fixture(
        "MCP conformance: tool error",
        "Fails at once: a tool execution error (isError), never a protocol error.",
        _node("fail", "fail", code="tool_error", message="Failed by design."),
    ),
    "test_missing_capability": _fixture(
        "MCP conformance: needs sampling",
        "Asks the client's model; a caller that did not declare sampling is refused.",
        _node("ask", "sampling", prompt="Say hello."),
    ),
    "test_input_required_result_sampling": _fixture(
        "MCP conformance: sampling by MRTR",
        "Asks the client's model (sampling/createMessage), then completes with its answer.",
        _node("capital_question", "sampling", prompt="What is the capital of France?", maxTokens=100),
    ),
    "test_input_required_result_capabilities": _fixture(
        "MCP conformance: asks only what was declared",
        "Asks the client's model; it never sends an elicitation, which it does not need.",
        _node("ask", "sampling", prompt="Name a colour."),
    ),
    "test_input_required_result_list_roots": _fixture(
        "MCP conformance: roots by MRTR",
        "Asks the client for its roots (roots/list), then completes listing them.",
        _node("client_roots", "roots"),
    ),
    "json_schema_2020_12_tool": _fixture(
        "MCP conformance: JSON Schema 2020-12",
        "An inputSchema with 2020-12 keywords ($defs, $anchor, allOf, if/then/else); echoes its input.",
        _node("echo", "echo"),
        input_schema={
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
    ),
    "test_header_params": _fixture(
        "MCP conformance: header parameters",
        "region and priority are mirrored into Mcp-Param-Region / Mcp-Param-Priority (SEP-2243).",
        _text("route", "Routed to {{region}}."),
        input_schema={
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "priority": {"type": "integer", "x-mcp-header": "Priority"},
                "query": {"type": "string"},
            },
            "required": ["region"],
        },
    ),
    "protocol_error_job": _fixture(
        "MCP conformance: host fault",
        "Works for a second, then faults inside the host: as a task, failed with a JSON-RPC error.",
        _node("work", "delay", delayMs=1000),
        _node("fault", "host-fault"),
    ),
    "test_streaming_elicitation": _fixture(
        "MCP conformance: elicitation on the request",
        "Asks a question by form elicitation, answered on the same request (MRTR).",
        _ask("name", "What is your name?", _NAME),
    ),
    "test_input_required_result_elicitation": _fixture(
        "MCP conformance: input required",
        "One round of form elicitation, then completes with the answer.",
        _ask("name", "What is your name?", _NAME),
    ),
    "test_input_required_result_request_state": _fixture(
        "MCP conformance: requestState",
        "One round of form elicitation whose retry must carry the requestState.",
        _ask("ok", "Go on?", _OK),
    ),
    "test_input_required_result_tampered_state": _fixture(
        "MCP conformance: tampered requestState",
        "One round of form elicitation; a retry with an altered requestState is refused.",
        _ask("ok", "Go on?", _OK),
    ),
    "test_input_required_result_multi_round": _fixture(
        "MCP conformance: two rounds",
        "Two rounds of form elicitation, then completes with both answers.",
        _ask("name", "What is your name?", _NAME),
        _ask("color", "Which colour?", {"color": {"type": "string"}}),
    ),
    "greet": _fixture(
        "MCP conformance: greet",
        "Completes with a greeting for `name`.",
        _text("greet", "Hello, {{name}}!"),
        input_schema={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    ),
    "failing_job": _fixture(
        "MCP conformance: failing job",
        "Task support required: works for about a second, then fails with a tool execution error.",
        _node("work", "delay", delayMs=1000),
        _node("fail", "fail", code="job_failed", message="The job failed."),
        task_support="required",
    ),
    "slow_compute": _fixture(
        "MCP conformance: slow compute",
        "Sleeps `seconds` (0 to 600), then returns a result; cancelled while it sleeps if asked.",
        _node("compute", "delay", secondsInput="seconds"),
        _text("result", "Computed after {{seconds}} s.", label="{{label}}"),
        input_schema={
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 600}, "label": {"type": "string"}},
            "required": ["seconds"],
        },
    ),
    # A parallel node's branches are nodes with ids of their own.
    "test_input_required_result_multiple_inputs": _fixture(
        "MCP conformance: three questions at once",
        "Asks the user's name, the client's model and its roots in one round (a parallel node), "
        "then completes with all three answers.",
        _node(
            "gather",
            "parallel",
            branches=[
                {**_ask("name", "What is your name?", _NAME), "id": "user_name"},
                _node("greeting", "sampling", prompt="Generate a greeting", maxTokens=50),
                _node("client_roots", "roots"),
            ],
        ),
    ),
    "multi_input": _fixture(
        "MCP conformance: two questions at once",
        "Asks two questions by form elicitation at the same time; completes once both are answered.",
        _node(
            "both",
            "parallel",
            branches=[_ask("first", "Who signs first?", _NAME), _ask("second", "Who signs second?", _NAME)],
        ),
    ),
    "test_tool_with_task": _fixture(
        "MCP conformance: input, then a task",
        "Task support required. Asks the user's name by MRTR first; once answered it becomes a "
        "task that works for a moment, then greets them.",
        _ask("user_name", "What is your name?", _NAME),
        _node("work", "delay", delayMs=1500),
        _text("greet", "Hello, {{user_name.answers.name}}!"),
        task_support="required",
        input_before_task=True,
    ),
    "confirm_delete": _fixture(
        "MCP conformance: confirm delete",
        "Parks until the caller confirms deleting `filename`, then completes.",
        _ask("confirm", "Delete the file?", {"confirm": {"type": "boolean"}}),
        input_schema={"type": "object", "properties": {"filename": {"type": "string"}}},
    ),
}

# Artifacts as MCP resources and rich content, built from `artifact` nodes: each artifact answers a
# resource_link (openwop:runs/<runId>/artifacts/<artifactId>); an image/* or audio/* file adds
# image/audio content; `embed: true` adds an embedded resource (apps/mcp/projection.py).
_PNG_1X1_RED = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
_WAV_SILENCE = "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA=="  # 8 samples, 8 kHz


def _file_artifact(node_id: str, filename: str, media_type: str, data: str) -> dict[str, Any]:
    file = {"filename": filename, "mediaType": media_type, "bytes": data}
    return _node(node_id, "artifact", name=filename, file=file)


_EMBEDDED_TEXT = _node(
    "embedded", "artifact", name="embedded.txt", text="This is an embedded resource content.", embed=True
)

MCP_CONTENT_FIXTURES: dict[str, dict[str, Any]] = {
    "conformance-artifact": _fixture(
        "Conformance: artifact",
        "Completes with one text/plain artifact holding `text`, readable as an MCP resource.",
        _node("artifact", "artifact", name="text", text="{{text}}"),
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
    "test_image_content": _fixture(
        "MCP conformance: image content",
        "Completes with a 1x1 red PNG artifact (image content).",
        _file_artifact("image", "red.png", "image/png", _PNG_1X1_RED),
    ),
    "test_audio_content": _fixture(
        "MCP conformance: audio content",
        "Completes with a short silent WAV artifact (audio content).",
        _file_artifact("audio", "silence.wav", "audio/wav", _WAV_SILENCE),
    ),
    "test_embedded_resource": _fixture(
        "MCP conformance: embedded resource",
        "Completes with a text artifact embedded in the result (resource content).",
        _EMBEDDED_TEXT,
    ),
    "test_multiple_content_types": _fixture(
        "MCP conformance: mixed content",
        "Completes with text, an image artifact and an embedded text artifact.",
        _file_artifact("image", "red.png", "image/png", _PNG_1X1_RED),
        _EMBEDDED_TEXT,
        _text("text", "Text, an image and a resource."),
    ),
}


def _log(node_id: str, message: str) -> dict[str, Any]:
    return _node(node_id, "log", level="info", message=message)


# Logging and progress on the request's own stream: test_logging_tool, test_tool_with_progress.
MCP_STREAM_FIXTURES: dict[str, dict[str, Any]] = {
    # Instant (settled in the request): answered at once when the call asks for no log, which is
    # what `sep-2575-server-no-log-without-loglevel` times (500 ms); with logLevel its three `log`
    # nodes are three info messages on the request's stream (apps/mcp/notifications.py).
    "test_logging_tool": _fixture(
        "MCP conformance: logging",
        "Logs three info messages, then completes with one text output.",
        _log("started", "Tool execution started"),
        _log("processing", "Tool processing data"),
        _log("completed", "Tool execution completed"),
        _text("text", "Logging test completed."),
    ),
    # Three nodes, so three node completions: progress 1/3, 2/3, 3/3 (`tools-call-with-progress`
    # wants at least three, increasing). Its waits (delayMs, default 50) run in a worker, so the
    # progress is reported as the run advances.
    "test_tool_with_progress": _fixture(
        "MCP conformance: progress",
        "Two steps of delayMs milliseconds (default 50), then completes with one text output.",
        _node("step-1", "delay", delayMs=50, delayMsInput="delayMs"),
        _node("step-2", "delay", delayMs=50, delayMsInput="delayMs"),
        _text("text", "Progress test completed."),
        input_schema=_DELAY_MS_INPUT,
    ),
}

FIXTURE_WORKFLOWS.update(MCP_CONFORMANCE_FIXTURES)
FIXTURE_WORKFLOWS.update(MCP_CONTENT_FIXTURES)
FIXTURE_WORKFLOWS.update(MCP_STREAM_FIXTURES)


def fixture_workflow_ids() -> list[str]:
    return sorted(FIXTURE_WORKFLOWS)
