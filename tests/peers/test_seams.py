"""The client seams (`/conformance/seams/sample/{a2a,mcp}/invoke`): off by default (404, and no
`conformance` block in discovery); on, they drive the real client path against real peers and
the decision is readable from `/runs/{runId}/events/poll`, as the suite reads it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client, override_settings
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from apps.runs.trace_context import trace_id_of
from tests.live import free_port
from tests.peers.conftest import Caller
from tests.peers.peer_apps import AskingTool, EchoAgent, a2a_agent_app, mcp_adder_app, mcp_asking_app
from tests.peers.peer_servers import Peer

pytestmark = pytest.mark.django_db(transaction=True)
seams_on = override_settings(OPENWOP_CONFORMANCE_SEAMS=True)
A2A_SEAM = "/conformance/seams/sample/a2a/invoke"
MCP_SEAM = "/conformance/seams/sample/mcp/invoke"


def _decided(caller: Caller, run_id: str) -> list[dict[str, Any]]:
    response = caller.get(f"/runs/{run_id.replace('/', '~2F')}/events/poll?afterSequence=0&timeout=1")
    assert response.status_code == 200, response.content
    return [e["payload"] for e in response.json()["events"] if e["type"] == "negotiation.decided"]


def _a2a_peer(serve: Callable[..., Peer]) -> Peer:
    port = free_port()
    return serve("a2a-peer.test", a2a_agent_app(f"https://a2a-peer.test:{port}", EchoAgent()), port=port)


def test_the_seams_are_absent_by_default(acme: Caller) -> None:
    for path in (A2A_SEAM, MCP_SEAM):
        assert acme.post(path, {"peerUrl": "https://x.test"}).status_code == 404
        assert Client().post(path, data="{}", content_type="application/json").status_code == 404
    assert "conformance" not in Client().get("/.well-known/openwop").json()


@seams_on
def test_discovery_lists_the_seams_profile_when_on() -> None:
    assert Client().get("/.well-known/openwop").json()["conformance"] == {
        "seamsProfile": "openwop-conformance-seams-v2"
    }


@seams_on
def test_the_seams_need_a_tenant_credential() -> None:
    response = Client().post(A2A_SEAM, data='{"peerUrl": "https://x.test"}', content_type="application/json")
    assert response.status_code == 401


@seams_on
def test_a2a_invoke_reports_the_exchange_and_its_record(acme: Caller, serve: Callable[..., Peer]) -> None:
    peer = _a2a_peer(serve)
    response = acme.post(A2A_SEAM, {"peerUrl": peer.origin})
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"negotiatedVersion", "protocol", "runId", "peerDigest", "result"}
    assert (body["negotiatedVersion"], body["protocol"]) == ("1.0", "a2a")
    assert body["peerDigest"] == hashlib.sha256(peer.origin.encode()).hexdigest()
    assert body["runId"].startswith("acme/")
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    [decided] = _decided(acme, body["runId"])
    assert (decided["outcome"], decided["version"], decided["requested"]) == ("accepted", "1.0", "1.0")


@seams_on
def test_a2a_invoke_below_the_floor_is_a_400_naming_the_run(acme: Caller, serve: Callable[..., Peer]) -> None:
    legacy = {
        "name": "old",
        "description": "",
        "version": "1",
        "protocolVersion": "0.3.0",
        "url": "x",
        "capabilities": {},
        "skills": [],
    }
    peer = serve(
        "old-peer.test",
        Starlette(
            routes=[
                Route("/.well-known/agent-card.json", lambda request: JSONResponse(legacy)),
            ]
        ),
    )
    response = acme.post(A2A_SEAM, {"peerUrl": peer.origin})
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"] == "interop_version_unsupported"
    details = body["details"]
    assert (details["protocol"], details["requested"], details["supported"], details["reason"]) == (
        "a2a",
        "1.0",
        ["1.0"],
        "below-floor",
    )
    [decided] = _decided(acme, details["runId"])
    assert (decided["outcome"], decided["reason"], decided["floor"]) == ("refused", "below-floor", "1.0")
    assert {s.headers.get("a2a-version") for s in peer.seen} == {"1.0"}


@seams_on
def test_a2a_invoke_with_a_version_below_the_floor_sends_nothing(acme: Caller, serve: Callable[..., Peer]) -> None:
    peer = _a2a_peer(serve)
    response = acme.post(A2A_SEAM, {"peerUrl": peer.origin, "requestVersion": "0.3"})
    assert response.status_code == 400 and response.json()["details"]["requested"] == "0.3"
    assert peer.seen == []


@seams_on
def test_mcp_invoke_calls_the_tool_or_only_negotiates(acme: Caller, serve: Callable[..., Peer]) -> None:
    peer = serve("mcp-peer.test", mcp_adder_app())
    url = f"{peer.origin}/mcp"
    called = acme.post(MCP_SEAM, {"serverUrl": url, "tool": "add", "arguments": {"a": 20, "b": 22}})
    assert called.status_code == 200, called.content
    assert called.json()["result"]["structuredContent"] == {"result": 42}
    assert called.json()["protocol"] == "mcp" and called.json()["negotiatedVersion"] == "2026-07-28"
    discovered = acme.post(MCP_SEAM, {"serverUrl": url})
    assert discovered.status_code == 200, discovered.content
    assert discovered.json()["result"]["supportedVersions"] == ["2026-07-28"]
    for body in (called.json(), discovered.json()):
        [decided] = _decided(acme, body["runId"])
        assert decided["version"] == body["negotiatedVersion"]


@seams_on
def test_mcp_invoke_past_the_round_ceiling_is_a_422(acme: Caller, serve: Callable[..., Peer]) -> None:
    peer = serve("asker.test", mcp_asking_app(AskingTool()))
    response = acme.post(
        MCP_SEAM,
        {
            "serverUrl": f"{peer.origin}/mcp",
            "tool": "ask",
            "elicitationAnswer": {"action": "accept", "content": {"ok": True}},
        },
    )
    assert response.status_code == 422, response.content
    assert response.json()["error"] == "mcp_mrtr_rounds_exceeded"
    assert response.json()["details"]["runId"].startswith("acme/")


@seams_on
def test_another_tenant_cannot_read_the_seam_run(acme: Caller, globex: Caller, serve: Callable[..., Peer]) -> None:
    peer = _a2a_peer(serve)
    run_id = acme.post(A2A_SEAM, {"peerUrl": peer.origin}).json()["runId"]
    response = globex.get(f"/runs/{run_id.replace('/', '~2F')}/events/poll?afterSequence=0&timeout=1")
    assert response.status_code == 403 and response.json()["error"] == "id_tenant_mismatch"


@seams_on
def test_the_seam_carries_the_callers_trace_to_the_peer(acme: Caller, serve: Callable[..., Peer]) -> None:
    """The suite sends its own traceparent on the seam request and reads it at its peer."""
    theirs = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    a2a = _a2a_peer(serve)
    assert acme.post(A2A_SEAM, {"peerUrl": a2a.origin}, traceparent=theirs).status_code == 200
    [sent] = [s for s in a2a.seen if s.method == "POST"]
    carried = sent.json()["params"]["message"]["metadata"]["openwop"]["traceparent"]
    mcp = serve("mcp-peer.test", mcp_adder_app())
    assert acme.post(MCP_SEAM, {"serverUrl": f"{mcp.origin}/mcp"}, traceparent=theirs).status_code == 200
    [discover] = [s for s in mcp.seen if s.method == "POST"]
    for value in (carried, discover.json()["params"]["_meta"]["traceparent"]):
        assert trace_id_of(value) == "4bf92f3577b34da6a3ce929d0e0e4736"
