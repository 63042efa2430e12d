"""How a failed peer call is named: with a registered code where one means it
(interop_version_unsupported, mcp_mrtr_rounds_exceeded, forbidden, ...), else an
`openwop-host.*` vendor code with its own status. The node.failed and run.failed events, the
run's error and the seam's envelope all carry the same code; the envelope validates against the
vendored schema. A cancel during a peer call ends the run cancelled, with no failure code."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.test import override_settings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from apps.core.errors import VENDOR_STATUS
from apps.peers.seams import SeamExchangeFailed
from apps.runs.models import Run, RunStatus
from apps.runs.services import run_cancel
from tests.core.test_egress import FakeDns
from tests.envelope import assert_envelope
from tests.live import free_port
from tests.peers.conftest import Caller, events, run_node
from tests.peers.peer_servers import Peer
from tests.peers.test_a2a_call import _card
from tests.peers.test_seams import A2A_SEAM

pytestmark = pytest.mark.django_db(transaction=True)


def _same_code_everywhere(run: Run, code: str) -> None:
    [node_failed] = events(run, "node.failed")
    [run_failed] = events(run, "run.failed")
    assert node_failed.payload["error"]["code"] == run_failed.payload["error"]["code"] == run.error["code"] == code


def _working_peer(serve: Callable[..., Peer]) -> Peer:
    """A peer whose task never ends."""
    port = free_port()
    origin = f"https://slow-peer.test:{port}"
    task = {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}}

    async def rpc(request: Request) -> JSONResponse:
        body = await request.json()
        result = {"task": task} if body["method"] == "SendMessage" else task
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": result})

    return serve(
        "slow-peer.test",
        Starlette(
            routes=[
                Route("/.well-known/agent-card.json", lambda request: JSONResponse(_card(origin))),
                Route("/a2a", rpc, methods=["POST"]),
            ]
        ),
        port=port,
    )


@override_settings(OPENWOP_CONFORMANCE_SEAMS=True)
def test_an_unreachable_peer_is_a_502_vendor_code_on_the_seam_and_in_the_events(acme: Caller, dns: FakeDns) -> None:
    dns.set("gone-peer.test", ["127.0.0.1"])  # nothing listens on this port
    response = acme.post(A2A_SEAM, {"peerUrl": f"https://gone-peer.test:{free_port()}"})
    body = assert_envelope(response, "openwop-host.peer_unreachable", 502)
    run = Run.unscoped_all_tenants.get(run_id=body["details"]["runId"])
    _same_code_everywhere(run, "openwop-host.peer_unreachable")


@override_settings(OPENWOP_CONFORMANCE_SEAMS=True)
def test_a_url_the_egress_guard_refuses_is_a_400_vendor_code(acme: Caller) -> None:
    response = acme.post(A2A_SEAM, {"peerUrl": "http://plain-peer.test/"})
    body = assert_envelope(response, "openwop-host.peer_url_rejected", 400)
    assert body["details"]["reason"] == "scheme_not_https"
    _same_code_everywhere(
        Run.unscoped_all_tenants.get(run_id=body["details"]["runId"]), "openwop-host.peer_url_rejected"
    )


@override_settings(OPENWOP_CONFORMANCE_SEAMS=True)
def test_a_peer_answering_nonsense_is_a_502_protocol_error(acme: Caller, serve: Callable[..., Peer]) -> None:
    port = free_port()
    peer = serve(
        "odd-peer.test",
        Starlette(
            routes=[
                Route("/.well-known/agent-card.json", lambda request: PlainTextResponse("no card here")),
            ]
        ),
        port=port,
    )
    response = acme.post(A2A_SEAM, {"peerUrl": peer.origin})
    body = assert_envelope(response, "openwop-host.peer_protocol_error", 502)
    _same_code_everywhere(
        Run.unscoped_all_tenants.get(run_id=body["details"]["runId"]), "openwop-host.peer_protocol_error"
    )


def test_a_peer_task_that_never_ends_is_a_peer_timeout(acme: Caller, serve: Callable[..., Peer]) -> None:
    peer = _working_peer(serve)
    run = run_node(acme, "a2a.call", {"url": peer.origin, "text": "hi", "timeoutMs": 600})
    assert run.status == RunStatus.FAILED
    _same_code_everywhere(run, "openwop-host.peer_timeout")
    assert run.error["details"] == {"taskId": "t1"} and VENDOR_STATUS["openwop-host.peer_timeout"] == 504


def test_a_cancel_while_following_the_peer_task_ends_the_run_cancelled(
    acme: Caller, serve: Callable[..., Peer]
) -> None:
    peer = _working_peer(serve)

    def cancel_once_polling() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(peer.seen) < 3:  # card, SendMessage, a GetTask
            time.sleep(0.05)
        run = Run.unscoped_all_tenants.filter(status="running").first()
        assert run is not None
        run_cancel(subject=acme.subject, run_id=run.run_id, reason="test")

    canceller = threading.Thread(target=cancel_once_polling)
    canceller.start()
    run = run_node(acme, "a2a.call", {"url": peer.origin, "text": "hi", "timeoutMs": 20_000})
    canceller.join()
    assert run.status == RunStatus.CANCELLED
    assert events(run, "node.failed") == [] and events(run, "run.failed") == [] and run.error in (None, {})


@pytest.mark.parametrize(
    ("error", "code", "status"),
    [
        ({"code": "openwop-host.peer_error", "message": "m"}, "openwop-host.peer_error", 502),
        ({"code": "mcp_mrtr_rounds_exceeded", "message": "m"}, "mcp_mrtr_rounds_exceeded", 422),
        ({"code": "not-a-code", "message": "m"}, "internal_error", 500),  # never put on the wire
        ({}, "internal_error", 500),
    ],
)
def test_the_seam_answer_keeps_a_known_code_and_its_status(error: dict, code: str, status: int) -> None:  # type: ignore[type-arg]
    failed = SeamExchangeFailed(error, "acme/run1")
    assert (failed.code, failed.status, failed.envelope()["details"]["runId"]) == (code, status, "acme/run1")
