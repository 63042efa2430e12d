"""The seams' `requestVersion` probe (host-sample-test-seams §22/§23: "used to force an
unsupported one"), as `v2-a2a-client-error-details` drives it: a version above the floor that we
do not speak goes on the wire as asked, the peer's refusal (-32009 with `data` as Any[] or as a
legacy object; MCP -32022) projects to 400 interop_version_unsupported, and the run keeps one
refused `negotiation.decided` whose `requested` is what was asked. Below the floor nothing is
sent; workflow node kinds never probe. All peers are real HTTPS servers on loopback."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from apps.core.errors import ValidationFailed
from apps.runs.models import RunStatus
from tests.envelope import assert_envelope
from tests.live import free_port
from tests.peers.conftest import Caller, decisions, run_node
from tests.peers.peer_apps import EchoAgent, a2a_agent_app, mcp_adder_app
from tests.peers.peer_servers import Peer
from tests.peers.test_a2a_call import ANY_DATA, LEGACY_DATA, _card
from tests.peers.test_seams import A2A_SEAM, MCP_SEAM, _decided, seams_on

pytestmark = pytest.mark.django_db(transaction=True)


def _suite_like_peer(serve: Callable[..., Peer], data: object) -> Peer:
    """Like the suite's A2AFakePeer({protocolVersions: ['1.0']}): any card GET gets the 1.0 card;
    a JSON-RPC call is judged by its own A2A-Version and refused -32009 unless it names 1.0."""
    port = free_port()
    origin = f"https://strict-peer.test:{port}"

    async def rpc(request: Request) -> JSONResponse:
        body = await request.json()
        if request.headers.get("a2a-version") != "1.0":
            error = {"code": -32009, "message": "Version not supported", "data": data}
            return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "error": error}, status_code=400)
        return JSONResponse(
            {
                "jsonrpc": "2.0",
                "id": body["id"],
                "result": {"message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "ok"}]}},
            }
        )

    return serve(
        "strict-peer.test",
        Starlette(
            routes=[
                Route("/.well-known/agent-card.json", lambda request: JSONResponse(_card(origin))),
                Route("/a2a", rpc, methods=["POST"]),
            ]
        ),
        port=port,
    )


def _assert_refused_probe(caller: Caller, response: Any, protocol: str, asked: str) -> dict[str, Any]:
    body = assert_envelope(response, "interop_version_unsupported", 400)
    details = body["details"]
    assert (details["protocol"], details["requested"], details["reason"]) == (protocol, asked, "unsupported")
    assert details["runId"].startswith(f"{caller.tenant}/")
    [decided] = _decided(caller, details["runId"])  # exactly one record: the refusal
    assert (decided["outcome"], decided["reason"], decided["requested"]) == ("refused", "unsupported", asked)
    assert "version" not in decided
    return details


@seams_on
@pytest.mark.parametrize("data", [ANY_DATA, LEGACY_DATA], ids=["any-array", "legacy-object"])
def test_a2a_request_version_above_the_floor_is_sent_and_the_peers_refusal_projected(
    acme: Caller, serve: Callable[..., Peer], data: object
) -> None:
    peer = _suite_like_peer(serve, data)
    response = acme.post(A2A_SEAM, {"peerUrl": peer.origin, "authenticated": True, "requestVersion": "99.0"})
    details = _assert_refused_probe(acme, response, "a2a", "99.0")
    assert details["peerSupported"] == ["2.0"]  # read from either shape of error.data
    # What the peer saw: the card asked for at 99.0, then the message itself at 99.0.
    assert [(s.method, s.path, s.headers.get("a2a-version")) for s in peer.seen] == [
        ("GET", "/.well-known/agent-card.json", "99.0"),
        ("POST", "/a2a", "99.0"),
    ]
    assert peer.seen[1].json()["method"] == "SendMessage"


@seams_on
def test_a2a_request_version_reaches_a_real_a2a_sdk_agent_which_refuses_it(
    acme: Caller, serve: Callable[..., Peer]
) -> None:
    port = free_port()
    agent = EchoAgent()
    peer = serve("a2a-peer.test", a2a_agent_app(f"https://a2a-peer.test:{port}", agent), port=port)
    response = acme.post(A2A_SEAM, {"peerUrl": peer.origin, "requestVersion": "99.0"})
    _assert_refused_probe(acme, response, "a2a", "99.0")
    posts = [s for s in peer.seen if s.method == "POST"]
    assert [s.headers.get("a2a-version") for s in posts] == ["99.0"]
    assert agent.messages == []  # the SDK refused before its executor ran


@seams_on
def test_a_peer_that_takes_a_version_we_do_not_speak_is_still_refused(acme: Caller, serve: Callable[..., Peer]) -> None:
    port = free_port()
    origin = f"https://lax-peer.test:{port}"

    async def anything(request: Request) -> JSONResponse:
        body = await request.json()
        return JSONResponse(
            {
                "jsonrpc": "2.0",
                "id": body["id"],
                "result": {"message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "sure"}]}},
            }
        )

    peer = serve(
        "lax-peer.test",
        Starlette(
            routes=[
                Route("/.well-known/agent-card.json", lambda request: JSONResponse(_card(origin))),
                Route("/a2a", anything, methods=["POST"]),
            ]
        ),
        port=port,
    )
    response = acme.post(A2A_SEAM, {"peerUrl": peer.origin, "requestVersion": "99.0"})
    details = _assert_refused_probe(acme, response, "a2a", "99.0")
    assert details["peerAccepted"] is True
    assert [s.headers.get("a2a-version") for s in peer.seen] == ["99.0", "99.0"]
    assert "sure" not in response.content.decode()  # an answer at a version we do not speak is not used


@seams_on
@pytest.mark.parametrize(("asked", "reason"), [("0.3", "below-floor"), ("nine", "unsupported")])
def test_a2a_request_version_below_the_floor_or_malformed_is_never_sent(
    acme: Caller, serve: Callable[..., Peer], asked: str, reason: str
) -> None:
    peer = _suite_like_peer(serve, ANY_DATA)
    response = acme.post(A2A_SEAM, {"peerUrl": peer.origin, "requestVersion": asked})
    body = assert_envelope(response, "interop_version_unsupported", 400)
    assert (body["details"]["requested"], body["details"]["reason"]) == (asked, reason)
    [decided] = _decided(acme, body["details"]["runId"])
    assert (decided["outcome"], decided["reason"], decided["requested"]) == ("refused", reason, asked)
    assert peer.seen == []


@seams_on
def test_the_seams_plain_version_keeps_the_strict_table(acme: Caller, serve: Callable[..., Peer]) -> None:
    peer = _suite_like_peer(serve, ANY_DATA)
    response = acme.post(A2A_SEAM, {"peerUrl": peer.origin, "version": "99.0"})
    assert_envelope(response, "interop_version_unsupported", 400)
    assert peer.seen == []


def test_a_workflow_node_never_probes(acme: Caller, serve: Callable[..., Peer]) -> None:
    """`a2a.call` takes no requestVersion, and its `version` follows the table: 99.0 is refused
    locally and nothing reaches the peer."""
    peer = _suite_like_peer(serve, ANY_DATA)
    run = run_node(acme, "a2a.call", {"url": peer.origin, "text": "hi", "version": "99.0"})
    assert run.status == RunStatus.FAILED and run.error["code"] == "interop_version_unsupported"
    [decided] = decisions(run)
    assert (decided["outcome"], decided["reason"], decided["requested"]) == ("refused", "unsupported", "99.0")
    assert peer.seen == []
    with pytest.raises(ValidationFailed) as refused:
        run_node(acme, "a2a.call", {"url": peer.origin, "requestVersion": "99.0"})
    assert "requestVersion" in json.dumps(refused.value.details)


def test_the_seam_node_kinds_refuse_to_run_with_the_seams_off(acme: Caller, serve: Callable[..., Peer]) -> None:
    peer = _suite_like_peer(serve, ANY_DATA)
    run = run_node(acme, "openwop-host.seam.a2a-call", {"url": peer.origin, "requestVersion": "99.0"})
    assert run.status == RunStatus.FAILED and run.error["code"] == "forbidden"
    assert peer.seen == [] and decisions(run) == []


@seams_on
def test_mcp_request_version_above_the_floor_is_sent_and_refused_by_the_server(
    acme: Caller, serve: Callable[..., Peer]
) -> None:
    peer = serve("mcp-peer.test", mcp_adder_app())
    response = acme.post(
        MCP_SEAM,
        {
            "serverUrl": f"{peer.origin}/mcp",
            "tool": "add",
            "arguments": {"a": 1, "b": 2},
            "requestVersion": "2099-01-01",
        },
    )
    details = _assert_refused_probe(acme, response, "mcp", "2099-01-01")
    assert "2026-07-28" in details["peerSupported"]
    # One server/discover naming 2099-01-01 (header and _meta); the refusal settles it: no tools/call.
    posts = [s for s in peer.seen if s.method == "POST"]
    assert [(s.json()["method"], s.headers.get("mcp-protocol-version")) for s in posts] == [
        ("server/discover", "2099-01-01")
    ]
    assert posts[0].json()["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2099-01-01"


@seams_on
def test_mcp_request_version_below_the_floor_is_never_sent(acme: Caller, serve: Callable[..., Peer]) -> None:
    peer = serve("mcp-peer.test", mcp_adder_app())
    response = acme.post(MCP_SEAM, {"serverUrl": f"{peer.origin}/mcp", "requestVersion": "2025-06-18"})
    body = assert_envelope(response, "interop_version_unsupported", 400)
    assert body["details"]["reason"] == "below-floor"
    assert peer.seen == []
