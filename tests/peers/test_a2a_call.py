"""`a2a.call` against real peers on loopback over HTTPS (interop.md §Negotiation, §Trace context):
an a2a-sdk agent offering 1.0 only, a peer offering only 0.3 (refused below the floor, nothing
below the floor ever sent), and peers answering -32009 in both error-data shapes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable

import pytest
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from apps.runs.models import Run, RunStatus
from apps.runs.services import run_cancel
from apps.runs.trace_context import trace_id_of
from tests.live import free_port
from tests.peers.conftest import Caller, credential_for, decisions, run_node
from tests.peers.peer_apps import EchoAgent, a2a_agent_app
from tests.peers.peer_servers import Peer

pytestmark = pytest.mark.django_db(transaction=True)


def _digest(origin: str) -> str:
    return hashlib.sha256(origin.encode()).hexdigest()


def _no_clear_peer(payload: dict, name: str) -> None:  # type: ignore[type-arg]
    assert name not in json.dumps(payload)


def test_a_1_0_peer_gets_one_message_with_our_credential_and_trace(
    acme: Caller, serve: Callable[..., Peer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = free_port()
    agent = EchoAgent()
    peer = serve("a2a-peer.test", a2a_agent_app(f"https://a2a-peer.test:{port}", agent), port=port)
    credential = credential_for(acme, peer.origin, secret="s3cret-for-peer")
    run = run_node(
        acme, "a2a.call", {"url": peer.origin, "text": "{{text}}", "credentialId": credential}, {"text": "hello"}
    )

    assert run.status == RunStatus.COMPLETED, run.error
    assert run.outputs["negotiatedVersion"] == "1.0"
    assert run.outputs["peerDigest"] == _digest(peer.origin)
    task = run.outputs["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"] == "echo: hello"
    [decided] = decisions(run)
    assert decided["outcome"] == "accepted" and decided["version"] == "1.0" and decided["requested"] == "1.0"
    assert decided["peerDigest"] == _digest(peer.origin) and decided["floor"] == "1.0"
    _no_clear_peer(decided, "a2a-peer.test")

    card_get, *posts = peer.seen
    assert (card_get.method, card_get.path, card_get.headers["a2a-version"]) == (
        "GET",
        "/.well-known/agent-card.json",
        "1.0",
    )
    assert posts[0].json()["method"] == "SendMessage"
    assert all(p.headers["a2a-version"] == "1.0" for p in posts)
    # The negotiation is authenticated too (interop.md §Negotiation): the card fetch carries it.
    assert all(s.headers["authorization"] == "Bearer s3cret-for-peer" for s in peer.seen)
    assert not any(acme.key in str(seen.headers) for seen in peer.seen)  # never the inbound key
    # Nor is the credential logged by the host's side at any level (the in-process peer's own
    # a2a-sdk debug logs print its inbound headers; they are the peer's, not ours).
    ours = [r.getMessage() for r in caplog.records if r.name.startswith(("apps", "httpx", "httpcore", "django"))]
    assert ours and not any("s3cret-for-peer" in line for line in ours)
    # The trace id the peer sees is the run's (interop.md §Trace context), in the message metadata.
    sent = agent.metadata_of(0)["openwop"]["traceparent"]
    assert trace_id_of(sent) == trace_id_of(run.traceparent) and sent != run.traceparent


def test_a_peer_offering_only_0_3_is_refused_below_the_floor(acme: Caller, serve: Callable[..., Peer]) -> None:
    legacy_card = {
        "name": "Old peer",
        "description": "0.3 only",
        "version": "1",
        "protocolVersion": "0.3.0",
        "url": "https://old-peer.test/a2a",
        "preferredTransport": "JSONRPC",
        "capabilities": {},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }
    peer = serve(
        "old-peer.test",
        Starlette(
            routes=[
                Route("/.well-known/agent-card.json", lambda request: JSONResponse(legacy_card)),
                Route("/a2a", lambda request: JSONResponse({}), methods=["POST"]),
            ]
        ),
    )
    run = run_node(acme, "a2a.call", {"url": peer.origin, "text": "hi"})

    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "interop_version_unsupported"
    details = run.error["details"]
    assert details["protocol"] == "a2a" and details["runId"] == run.run_id and details["reason"] == "below-floor"
    assert details["requested"] == "1.0" and details["supported"] == ["1.0"]
    [decided] = decisions(run)
    assert (decided["outcome"], decided["reason"], decided["floor"], decided["requested"]) == (
        "refused",
        "below-floor",
        "1.0",
        "1.0",
    )
    assert "version" not in decided
    # At the peer: one card fetch naming 1.0; no message; no version below the floor on the wire.
    assert [(s.method, s.headers.get("a2a-version")) for s in peer.seen] == [("GET", "1.0")]


def test_asking_for_a_version_below_the_floor_sends_nothing(acme: Caller, serve: Callable[..., Peer]) -> None:
    port = free_port()
    peer = serve("a2a-peer.test", a2a_agent_app(f"https://a2a-peer.test:{port}", EchoAgent()), port=port)
    run = run_node(acme, "a2a.call", {"url": peer.origin, "text": "hi", "version": "0.3"})

    assert run.status == RunStatus.FAILED and run.error["code"] == "interop_version_unsupported"
    [decided] = decisions(run)
    assert (decided["outcome"], decided["reason"], decided["requested"]) == ("refused", "below-floor", "0.3")
    assert peer.seen == []


def _card(origin: str) -> dict:  # type: ignore[type-arg]
    return {
        "name": "Strict peer",
        "description": "refuses",
        "version": "1",
        "supportedInterfaces": [{"url": f"{origin}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }


ANY_DATA = [
    {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "VERSION_NOT_SUPPORTED",
        "domain": "a2a-protocol.org",
        "metadata": {"supportedVersions": "2.0"},
    },
]
LEGACY_DATA = {"reason": "VERSION_NOT_SUPPORTED", "supportedVersions": ["2.0"]}


@pytest.mark.parametrize("data", [ANY_DATA, LEGACY_DATA], ids=["any-array", "legacy-object"])
def test_a_peer_32009_is_interop_version_unsupported(acme: Caller, serve: Callable[..., Peer], data: object) -> None:
    port = free_port()
    origin = f"https://strict-peer.test:{port}"

    async def refuse(request: Request) -> JSONResponse:
        body = await request.json()
        error = {"code": -32009, "message": "Version not supported", "data": data}
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "error": error}, status_code=400)

    peer = serve(
        "strict-peer.test",
        Starlette(
            routes=[
                Route("/.well-known/agent-card.json", lambda request: JSONResponse(_card(origin))),
                Route("/a2a", refuse, methods=["POST"]),
            ]
        ),
        port=port,
    )
    run = run_node(acme, "a2a.call", {"url": peer.origin, "text": "hi"})

    assert run.status == RunStatus.FAILED and run.error["code"] == "interop_version_unsupported"
    assert run.error["details"]["peerSupported"] == ["2.0"] and run.error["details"]["runId"] == run.run_id
    accepted, refused = decisions(run)
    assert accepted["outcome"] == "accepted" and refused["outcome"] == "refused"  # the last word is the refusal
    assert refused["requested"] == "1.0" and refused["reason"] == "unsupported"


def test_a_credential_goes_only_to_its_own_origin(acme: Caller, serve: Callable[..., Peer]) -> None:
    port = free_port()
    peer = serve("a2a-peer.test", a2a_agent_app(f"https://a2a-peer.test:{port}", EchoAgent()), port=port)
    elsewhere = credential_for(acme, "https://other-peer.test")
    run = run_node(acme, "a2a.call", {"url": peer.origin, "text": "hi", "credentialId": elsewhere})
    assert run.status == RunStatus.FAILED and run.error["code"] == "forbidden"
    assert peer.seen == []


def test_another_tenants_credential_is_not_found(acme: Caller, globex: Caller, serve: Callable[..., Peer]) -> None:
    """Cross-tenant: globex's credential id in acme's workflow is unknown, and nothing is sent."""
    port = free_port()
    peer = serve("a2a-peer.test", a2a_agent_app(f"https://a2a-peer.test:{port}", EchoAgent()), port=port)
    theirs = credential_for(globex, peer.origin)
    run = run_node(acme, "a2a.call", {"url": peer.origin, "text": "hi", "credentialId": theirs})
    assert run.status == RunStatus.FAILED and run.error["code"] == "not_found"
    assert peer.seen == []


def test_a_cancel_does_not_wait_for_a_slow_peer(acme: Caller, serve: Callable[..., Peer]) -> None:
    """The call runs beside a watcher that keeps the lease and sees the cancel (engine.py)."""

    async def slow_card(request: Request) -> JSONResponse:
        await asyncio.sleep(4)
        return JSONResponse({})

    peer = serve("slow-peer.test", Starlette(routes=[Route("/.well-known/agent-card.json", slow_card)]))
    started = time.monotonic()
    run_ids: list[str] = []

    def cancel_soon() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not peer.seen:
            time.sleep(0.05)
        run = Run.unscoped_all_tenants.filter(status="running").first()
        if run is not None:
            run_ids.append(run.run_id)
            run_cancel(subject=acme.subject, run_id=run.run_id, reason="test")

    canceller = threading.Thread(target=cancel_soon)
    canceller.start()
    run = run_node(acme, "a2a.call", {"url": peer.origin, "text": "hi", "timeoutMs": 10_000})
    canceller.join()
    assert run_ids == [run.run_id]
    assert run.status == RunStatus.CANCELLED
    assert time.monotonic() - started < 3.5  # the peer answers only after 4 s


@pytest.mark.parametrize(
    "answer",
    [
        {"result": {"task": {"id": "t", "status": {"state": "NOT_A_STATE"}}}},
        {"result": "not an object"},
        {"nothing": True},
    ],
    ids=["bad-task", "bad-result", "no-result"],
)
def test_a_peer_answering_nonsense_fails_the_node_cleanly(
    acme: Caller,
    serve: Callable[..., Peer],
    answer: dict,  # type: ignore[type-arg]
) -> None:
    port = free_port()
    origin = f"https://odd-peer.test:{port}"

    async def odd(request: Request) -> JSONResponse:
        body = await request.json()
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], **answer})

    serve(
        "odd-peer.test",
        Starlette(
            routes=[
                Route("/.well-known/agent-card.json", lambda request: JSONResponse(_card(origin))),
                Route("/a2a", odd, methods=["POST"]),
            ]
        ),
        port=port,
    )
    run = run_node(acme, "a2a.call", {"url": origin, "text": "hi"})
    assert run.status == RunStatus.FAILED and run.error["code"] == "openwop-host.peer_protocol_error", run.error


def test_data_goes_as_a_data_part(acme: Caller, serve: Callable[..., Peer]) -> None:
    port = free_port()
    agent = EchoAgent()
    peer = serve("a2a-peer.test", a2a_agent_app(f"https://a2a-peer.test:{port}", agent), port=port)
    run = run_node(acme, "a2a.call", {"url": peer.origin, "data": {"order": "{{order}}", "n": 2}}, {"order": 7})
    assert run.status == RunStatus.COMPLETED, run.error
    parts = json_format.MessageToDict(agent.messages[0])["parts"]
    assert parts == [{"data": {"order": 7, "n": 2}}]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://a2a-peer.test/", "scheme_not_https"),
        ("https://10.1.2.3/", "address_not_allowed"),
        ("https://metadata.google.internal/", "host_not_allowed"),
    ],
)
def test_the_egress_guard_stands_between_a_node_and_its_peer(acme: Caller, url: str, reason: str) -> None:
    run = run_node(acme, "a2a.call", {"url": url, "text": "hi"})
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "openwop-host.peer_url_rejected" and run.error["details"] == {"reason": reason}
    [decided] = decisions(run)  # the failed exchange is still recorded, content-free
    assert decided["outcome"] == "refused" and "10.1.2.3" not in json.dumps(decided)
