"""The peer applications: an a2a-sdk agent offering A2A 1.0 only, an mcp SDK server with one tool,
and a low-level mcp SDK server whose tool keeps asking for input (the round-ceiling peer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers.default_request_handler_v2 import DefaultRequestHandlerV2
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Message, Part, TaskState
from google.protobuf import json_format
from mcp.server import MCPServer
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import BaseRoute

NO_REBINDING_CHECK = TransportSecuritySettings(enable_dns_rebinding_protection=False)


@dataclass
class EchoAgent(AgentExecutor):
    """Completes every task with one artifact echoing the text; keeps the messages it received."""

    messages: list[Message] = field(default_factory=list)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        self.messages.append(context.message)
        task_id, context_id = context.task_id or "", context.context_id or ""
        await event_queue.enqueue_event(new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED))
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.add_artifact([Part(text="echo: " + context.get_user_input())], name="echo")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError

    def metadata_of(self, index: int) -> dict[str, Any]:
        return json_format.MessageToDict(self.messages[index].metadata)


def a2a_agent_app(
    base_url: str,
    agent: EchoAgent,
    *,
    card_hook: Callable[[AgentCard], AgentCard] | None = None,
    extra_routes: Sequence[BaseRoute] = (),
) -> Starlette:
    """`card_hook` may change the card before it is served (sign it, tamper with it); `extra_routes`
    serve more on the peer's origin (its JWKS)."""
    card = AgentCard(
        name="Echo peer",
        description="Echoes.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"{base_url}/a2a", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Echo", tags=["echo"])],
    )
    if card_hook is not None:
        card = card_hook(card)
    handler = DefaultRequestHandlerV2(agent_executor=agent, task_store=InMemoryTaskStore(), agent_card=card)
    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/a2a"), *extra_routes])


def mcp_adder_app() -> Any:
    server = MCPServer("adder", version="1.0.0")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return server.streamable_http_app(streamable_http_path="/mcp", transport_security=NO_REBINDING_CHECK)


@dataclass
class AskingTool:
    """A tool that answers every call, first and retries alike, with another InputRequiredResult;
    it remembers the requestState and inputResponses each call carried."""

    states_sent: list[str] = field(default_factory=list)
    states_received: list[str | None] = field(default_factory=list)
    responses_received: list[Any] = field(default_factory=list)
    answer_after: int | None = None  # complete once this many rounds were answered

    async def call(self, ctx: Any, params: types.CallToolRequestParams) -> Any:
        self.states_received.append(params.request_state)
        self.responses_received.append(
            None
            if params.input_responses is None
            else {
                k: v.model_dump(by_alias=True, exclude_none=True) if hasattr(v, "model_dump") else v
                for k, v in params.input_responses.items()
            }
        )
        rounds = len(self.states_received) - 1
        if self.answer_after is not None and rounds >= self.answer_after:
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"done after {rounds}")])
        # Bytes a careless client would re-encode: quotes, a backslash, non-ASCII, spaces.
        state = f'round-{rounds + 1} "é\\ ü" ' + "x" * 40
        self.states_sent.append(state)
        return types.InputRequiredResult(
            result_type="input_required",
            input_requests={
                f"ask-{rounds + 1}": {
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": "Continue?",
                        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                    },
                }
            },
            request_state=state,
        )


def mcp_asking_app(tool: AskingTool) -> Any:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[types.Tool(name="ask", input_schema={"type": "object"})], ttl_ms=0, cache_scope="public"
        )

    server = Server("asker", on_list_tools=list_tools, on_call_tool=tool.call)
    return server.streamable_http_app(streamable_http_path="/mcp", transport_security=NO_REBINDING_CHECK)
