"""`conformance-mcp-client` (RFC 0204, host-services.md §mcp): its `mcp.client` node calls
ctx.mcp.<method> with the run's inputs on the MCP server bound to `serverId`, here a real mcp SDK
server on loopback over HTTPS, and records the server's result unaltered as
`node.completed.outputs.result`: `_meta` kept, a tool error resolved (not a failure), one page per
call with the cursor forwarded, reachability from server/discover (an address nothing answers is
`unreachable`), and an unknown serverId fails the node `not_found`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import mcp_types as types
import pytest
from mcp.server.lowlevel import Server

from apps.agents.services import workflow_fixtures_seed
from apps.peers.services import peer_binding_set
from apps.runs.engine import run_advance
from apps.runs.models import Run, RunEvent
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from tests.live import free_port
from tests.peers.conftest import Caller, decisions
from tests.peers.peer_apps import NO_REBINDING_CHECK
from tests.peers.peer_servers import Peer

pytestmark = pytest.mark.django_db(transaction=True)

FIXTURE = "conformance-mcp-client"
TOOLS = [
    types.Tool(
        name=f"tool-{i}", input_schema={"type": "object"}, annotations=types.ToolAnnotations(read_only_hint=True)
    )
    for i in range(5)
]
PAGE = 2


async def _list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    start = int((params.cursor if params and params.cursor else "page:0").split(":")[1])
    end = start + PAGE
    return types.ListToolsResult(
        tools=TOOLS[start:end], next_cursor=f"page:{end}" if end < len(TOOLS) else None, ttl_ms=0, cache_scope="public"
    )


async def _call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    if params.name == "fails":
        return types.CallToolResult(content=[types.TextContent(type="text", text="broken by design")], is_error=True)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="ok")],
        structured_content={"n": 7, "nonce": arguments.get("nonce")},
        _meta={"example.test/nonce": arguments.get("nonce")},
    )


async def _read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=params.uri, text="the notes")])


def _tools_app() -> Any:
    server = Server("tools", on_list_tools=_list_tools, on_call_tool=_call_tool, on_read_resource=_read_resource)
    return server.streamable_http_app(streamable_http_path="/mcp", transport_security=NO_REBINDING_CHECK)


@pytest.fixture
def bound(acme: Caller, serve: Callable[..., Peer], dns: Any) -> Peer:
    """The fixture seeded and the tenant's two bindings: `conformance` (a live server) and
    `conformance-down` (a name on loopback where nothing listens)."""
    tenant = Tenant.objects.get(slug=acme.tenant)
    workflow_fixtures_seed(tenant=tenant)
    peer = serve("tools.test", _tools_app())
    dns.set("down.test", ["127.0.0.1"])
    peer_binding_set(tenant=tenant, protocol="mcp", binding_id="conformance", url=f"{peer.origin}/mcp")
    peer_binding_set(
        tenant=tenant, protocol="mcp", binding_id="conformance-down", url=f"https://down.test:{free_port()}/mcp"
    )
    return peer


def _run(caller: Caller, inputs: dict[str, Any]) -> tuple[Run, dict[str, Any]]:
    """Run the fixture to its end; (the run, its node's terminal event payload)."""
    run = run_create(subject=caller.subject, workflow_id=FIXTURE, inputs=inputs, transport="rest")
    run_advance(run_id=run.run_id, worker="test-worker")
    run = Run.unscoped_all_tenants.get(pk=run.pk)
    event = RunEvent.unscoped_all_tenants.filter(
        run=run, type__in=["node.completed", "node.failed"], node_id="mcp-client"
    ).get()
    return run, event.payload


def _sent(peer: Peer, method: str) -> list[dict[str, Any]]:
    return [s.json() for s in peer.seen if s.method == "POST" and s.json().get("method") == method]


def test_call_tool_resolves_to_the_servers_result_with_its_meta(acme: Caller, bound: Peer) -> None:
    run, payload = _run(
        acme, {"method": "callTool", "serverId": "conformance", "name": "echo", "arguments": {"nonce": "n-42"}}
    )
    assert run.status == "completed", run.error
    result = payload["outputs"]["result"]
    assert result["structuredContent"] == {"n": 7, "nonce": "n-42"}
    assert result["content"] == [{"type": "text", "text": "ok"}]
    assert result["_meta"]["example.test/nonce"] == "n-42"  # the server's _meta survives, unwrapped
    [call] = _sent(bound, "tools/call")
    assert call["params"]["name"] == "echo" and call["params"]["arguments"] == {"nonce": "n-42"}
    assert [d["outcome"] for d in decisions(run)] == ["accepted"]  # the exchange is on the run's log


def test_a_tool_error_is_a_result_not_a_failure(acme: Caller, bound: Peer) -> None:
    run, payload = _run(acme, {"method": "callTool", "serverId": "conformance", "name": "fails", "arguments": {}})
    assert run.status == "completed"
    assert payload["outputs"]["result"]["isError"] is True
    assert payload["outputs"]["result"]["content"] == [{"type": "text", "text": "broken by design"}]


def test_list_tools_is_one_page_and_forwards_the_cursor(acme: Caller, bound: Peer) -> None:
    _, first = _run(acme, {"method": "listTools", "serverId": "conformance"})
    page = first["outputs"]["result"]
    assert [t["name"] for t in page["tools"]] == ["tool-0", "tool-1"]  # not merged with later pages
    assert page["tools"][0]["annotations"] == {"readOnlyHint": True} and page["nextCursor"] == "page:2"
    _, second = _run(acme, {"method": "listTools", "serverId": "conformance", "cursor": page["nextCursor"]})
    assert [t["name"] for t in second["outputs"]["result"]["tools"]] == ["tool-2", "tool-3"]
    lists = _sent(bound, "tools/list")
    assert "cursor" not in lists[0]["params"] and lists[1]["params"]["cursor"] == "page:2"


def test_read_resource_resolves_to_the_servers_contents(acme: Caller, bound: Peer) -> None:
    _, payload = _run(acme, {"method": "readResource", "serverId": "conformance", "uri": "notes://today"})
    assert payload["outputs"]["result"]["contents"] == [{"uri": "notes://today", "text": "the notes"}]


def test_server_health_is_reachability_never_a_session_state(acme: Caller, bound: Peer) -> None:
    up_run, up = _run(acme, {"method": "serverHealth", "serverId": "conformance"})
    assert up_run.status == "completed"
    health = up["outputs"]["result"]
    assert health["state"] == "reachable" and "2026-07-28" in health["discover"]["supportedVersions"]
    down_run, down = _run(acme, {"serverId": "conformance-down"})  # method defaults to serverHealth
    _, default = _run(acme, {})  # and serverId to conformance (the fixture's defaults)
    assert default["outputs"]["result"]["state"] == "reachable"
    assert down_run.status == "completed"  # unreachable resolves, it does not reject
    assert down["outputs"]["result"]["state"] == "unreachable"
    text = json.dumps([health, down["outputs"]["result"]])
    assert '"connected"' not in text and '"disconnected"' not in text


def test_an_unknown_server_id_fails_the_node_not_found(acme: Caller, bound: Peer) -> None:
    run, payload = _run(acme, {"method": "callTool", "serverId": "nobody", "name": "echo"})
    assert run.status == "failed" and payload["error"]["code"] == "not_found"


def test_another_tenants_binding_is_not_there(acme: Caller, globex: Caller, bound: Peer) -> None:
    globex_tenant = Tenant.objects.get(slug=globex.tenant)
    workflow_fixtures_seed(tenant=globex_tenant)
    peer_binding_set(tenant=globex_tenant, protocol="mcp", binding_id="globex-only", url=f"{bound.origin}/mcp")
    run, payload = _run(acme, {"method": "serverHealth", "serverId": "globex-only"})
    assert run.status == "failed" and payload["error"]["code"] == "not_found"
    assert not _sent(bound, "server/discover")  # nothing reached the server on acme's behalf
