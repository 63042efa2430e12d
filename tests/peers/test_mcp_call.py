"""`mcp.call` against real mcp SDK servers on loopback over HTTPS: negotiation through
`server/discover`, the tool call with the run's trace in `params._meta`, and the round ceiling
(interop.md §The MCP round ceiling) against a peer that keeps asking."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from apps.facets.services import facet_ensure
from apps.runs.models import RunStatus
from apps.runs.trace_context import trace_id_of
from tests.peers.conftest import Caller, credential_for, decisions, events, run_node
from tests.peers.peer_apps import AskingTool, mcp_adder_app, mcp_asking_app
from tests.peers.peer_servers import Peer

pytestmark = pytest.mark.django_db(transaction=True)

ACCEPT = {"action": "accept", "content": {"ok": True}}


def test_a_tool_call_negotiates_and_carries_the_runs_trace(acme: Caller, serve: Callable[..., Peer]) -> None:
    peer = serve("mcp-peer.test", mcp_adder_app())
    credential = credential_for(acme, peer.origin, secret="mcp-secret")
    run = run_node(
        acme,
        "mcp.call",
        {"url": f"{peer.origin}/mcp", "tool": "add", "arguments": {"a": 2, "b": 3}, "credentialId": credential},
    )

    assert run.status == RunStatus.COMPLETED, run.error
    assert run.outputs["negotiatedVersion"] == "2026-07-28"
    result = run.outputs["result"]
    assert result["structuredContent"] == {"result": 5} and result.get("isError") in (None, False)
    [decided] = decisions(run)
    assert (decided["outcome"], decided["version"], decided["requested"]) == ("accepted", "2026-07-28", "2026-07-28")
    assert "mcp-peer.test" not in json.dumps(decided)

    posts = [s for s in peer.seen if s.method == "POST"]
    assert [p.json()["method"] for p in posts] == ["server/discover", "tools/call"]
    for post in posts:
        meta = post.json()["params"]["_meta"]
        assert post.headers["mcp-protocol-version"] == meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert trace_id_of(meta["traceparent"]) == trace_id_of(run.traceparent)  # the peer sees the run's trace
        assert post.headers["authorization"] == "Bearer mcp-secret"
    assert posts[1].headers["mcp-name"] == "add"


def test_the_round_ceiling_fails_the_node_at_max_rounds_plus_one(acme: Caller, serve: Callable[..., Peer]) -> None:
    tool = AskingTool()
    peer = serve("asker.test", mcp_asking_app(tool))
    max_rounds = facet_ensure(protocol="mcp").mrtr_max_rounds
    run = run_node(acme, "mcp.call", {"url": f"{peer.origin}/mcp", "tool": "ask", "elicitationAnswer": ACCEPT})

    assert run.status == RunStatus.FAILED
    assert run.error == {
        "code": "mcp_mrtr_rounds_exceeded",
        "message": f"The peer asked for input more than {max_rounds} times (mcp.mrtr.maxRounds).",
        "details": {"maxRounds": max_rounds},
    }
    # The first call plus max_rounds answered retries; round max_rounds+1 is never answered.
    assert len(tool.states_received) == max_rounds + 1
    assert tool.states_received[0] is None  # no requestState is invented
    assert tool.states_received[1:] == tool.states_sent[:max_rounds]  # each echoed exactly
    assert all(r == {f"ask-{i + 1}": ACCEPT} for i, r in enumerate(tool.responses_received[1:]))
    # Interim results are never kept: nothing in the run's log carries a requestState or request.
    log = json.dumps([e.payload for e in events(run)])
    assert "requestState" not in log and "inputRequests" not in log and "round-1" not in log


def test_rounds_within_the_ceiling_complete(acme: Caller, serve: Callable[..., Peer]) -> None:
    tool = AskingTool(answer_after=2)
    peer = serve("asker.test", mcp_asking_app(tool))
    run = run_node(acme, "mcp.call", {"url": f"{peer.origin}/mcp", "tool": "ask", "elicitationAnswer": ACCEPT})
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.outputs["result"]["content"][0]["text"] == "done after 2"
    assert tool.states_received[1:] == tool.states_sent


def test_input_without_an_answer_fails_without_retrying(acme: Caller, serve: Callable[..., Peer]) -> None:
    tool = AskingTool()
    peer = serve("asker.test", mcp_asking_app(tool))
    run = run_node(acme, "mcp.call", {"url": f"{peer.origin}/mcp", "tool": "ask"})
    assert run.status == RunStatus.FAILED and run.error["code"] == "openwop-host.mcp_input_unanswerable"
    assert len(tool.states_received) == 1


def test_a_peer_below_the_floor_is_refused_and_never_called(acme: Caller, serve: Callable[..., Peer]) -> None:
    async def old_server(request: Request) -> JSONResponse:
        body = await request.json()
        error = {
            "code": -32022,
            "message": "Unsupported protocol version",
            "data": {
                "supported": ["2025-06-18"],
                "requested": body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            },
        }
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "error": error}, status_code=400)

    peer = serve("old-mcp.test", Starlette(routes=[Route("/mcp", old_server, methods=["POST"])]))
    run = run_node(acme, "mcp.call", {"url": f"{peer.origin}/mcp", "tool": "add"})

    assert run.status == RunStatus.FAILED and run.error["code"] == "interop_version_unsupported"
    assert run.error["details"]["reason"] == "below-floor" and run.error["details"]["protocol"] == "mcp"
    [decided] = decisions(run)
    assert (decided["outcome"], decided["reason"], decided["requested"]) == ("refused", "below-floor", "2026-07-28")
    assert [s.json()["method"] for s in peer.seen] == ["server/discover"]
    assert {s.headers["mcp-protocol-version"] for s in peer.seen} == {"2026-07-28"}


@pytest.mark.parametrize(
    "result",
    [{"resultType": "task", "taskId": "t"}, {"resultType": "complete"}, {"resultType": "input_required"}],
    ids=["unknown-result-type", "complete-without-content", "input-required-with-nothing"],
)
def test_a_peer_answering_nonsense_fails_the_node_cleanly(
    acme: Caller,
    serve: Callable[..., Peer],
    result: dict,  # type: ignore[type-arg]
) -> None:
    async def odd(request: Request) -> JSONResponse:
        body = await request.json()
        if body["method"] == "server/discover":
            answer = {
                "resultType": "complete",
                "supportedVersions": ["2026-07-28"],
                "capabilities": {},
                "ttlMs": 0,
                "cacheScope": "public",
            }
        else:
            answer = result
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": answer})

    peer = serve("odd-mcp.test", Starlette(routes=[Route("/mcp", odd, methods=["POST"])]))
    run = run_node(acme, "mcp.call", {"url": f"{peer.origin}/mcp", "tool": "x", "elicitationAnswer": ACCEPT})
    assert run.status == RunStatus.FAILED and run.error["code"] == "openwop-host.peer_protocol_error", run.error
    assert [s.json()["method"] for s in peer.seen] == ["server/discover", "tools/call"]
