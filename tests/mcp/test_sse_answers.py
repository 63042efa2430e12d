"""Long `tools/call` answers: SSE with keep-alive comments when the client accepts it, so proxies
see bytes while the run works; quick answers and refusals stay plain JSON with their HTTP status."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from apps.mcp.views import SSE_AFTER_SECONDS
from apps.runs.models import Run
from tests.live import wait_until
from tests.mcp.conftest import routing_headers, rpc
from tests.mcp.sdk_client import mcp_client

pytestmark = pytest.mark.django_db(transaction=True)
BOTH = "application/json, text/event-stream"


@pytest.fixture
def key(live_url: str, live_worker, make_key) -> str:  # type: ignore[no-untyped-def]
    return make_key("acme")


def _post(url: str, key: str, body: dict, accept: str) -> httpx.Response:  # type: ignore[type-arg]
    headers = {"Authorization": f"Bearer {key}", "Accept": accept, **routing_headers(body)}
    return httpx.post(f"{url}/mcp", json=body, headers=headers, timeout=60)


def test_a_long_call_streams_comments_then_the_response(live_url: str, key: str) -> None:
    delay_ms = int(SSE_AFTER_SECONDS * 1000) + 1500
    body = rpc("tools/call", {"name": "conformance-delay", "arguments": {"delayMs": delay_ms}}, id=41)
    headers = {"Authorization": f"Bearer {key}", "Accept": BOTH, **routing_headers(body)}
    with httpx.stream("POST", f"{live_url}/mcp", json=body, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(response.iter_raw()).decode()
    comments = [line for line in raw.splitlines() if line.startswith(":")]
    events = [block for block in raw.split("\n\n") if block.startswith("event: message")]
    assert comments and raw.index(comments[0]) < raw.index("event: message")
    [event] = events
    message = json.loads(event.split("data: ", 1)[1])
    assert message["id"] == 41 and message["result"]["structuredContent"] == {"delayedMs": delay_ms}


def test_answers_in_hand_refusals_and_json_only_clients_get_json(live_url: str, key: str) -> None:
    listed = _post(live_url, key, rpc("tools/list"), BOTH)  # an answer in hand is never streamed
    assert listed.headers["content-type"] == "application/json" and listed.json()["result"]["tools"]
    refused = _post(
        live_url, key, rpc("tools/call", {"name": "conformance-approval", "arguments": {}}, capabilities={}), BOTH
    )
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32021
    delay_ms = int(SSE_AFTER_SECONDS * 1000) + 500
    body = rpc("tools/call", {"name": "conformance-delay", "arguments": {"delayMs": delay_ms}})
    plain = _post(live_url, key, body, "application/json")
    assert plain.headers["content-type"] == "application/json"
    assert plain.json()["result"]["structuredContent"] == {"delayedMs": delay_ms}


async def test_the_sdk_client_reads_a_streamed_answer(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key) as client:
        result = await client.call_tool("conformance-delay", {"delayMs": int(SSE_AFTER_SECONDS * 1000) + 1000})
    assert result.is_error is False and result.structured_content["delayedMs"] > SSE_AFTER_SECONDS * 1000  # type: ignore[index]


def test_a_disconnect_while_streaming_cancels_the_run(live_url: str, key: str) -> None:
    body = rpc("tools/call", {"name": "conformance-cancellable", "arguments": {"waitMs": 60000}})
    data = json.dumps(body).encode()
    parts = urlsplit(live_url)
    headers = {
        "Host": parts.netloc,
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/json",
        "Accept": BOTH,
        "Content-Length": str(len(data)),
        **routing_headers(body),
    }
    sock = socket.create_connection((parts.hostname, parts.port))
    head = "POST /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    sock.sendall(head.encode() + data)
    sock.settimeout(30)
    received = b""
    while b": the tool is running" not in received:  # the stream has begun: headers and a comment are out
        received += sock.recv(65536)
    assert b"text/event-stream" in received
    run = Run.unscoped_all_tenants.filter(transport="mcp", workflow__workflow_id="conformance-cancellable").latest("id")
    sock.close()
    wait_until(lambda: Run.unscoped_all_tenants.get(pk=run.pk).status == "cancelled", "the run to be cancelled")
    assert Run.unscoped_all_tenants.get(pk=run.pk).cancel_reason == "mcp-request-cancelled"
