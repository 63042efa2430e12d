"""Body size, JSON depth and per-key rate limits, refused before dispatch on every door, each in
its own wire (apps/core/request_limits.py): the OpenWOP envelope on REST, JSON-RPC / Status on
A2A, JSON-RPC on MCP. A refused request changes nothing; another key is never affected."""

from __future__ import annotations

import json
from typing import Any

import pytest

from apps.runs.models import Run
from tests.envelope import assert_envelope
from tests.hardening.conftest import (
    MCP_LIST_HEADERS,
    a2a_reason,
    a2a_send,
    assert_jsonrpc_error,
    mcp_list,
)

pytestmark = pytest.mark.django_db

DEEP = b'{"workflowId": ' + b"[" * 5000 + b"]" * 5000 + b"}"


def _padded(body: dict[str, Any], size: int) -> bytes:
    """`body` with an extra field that makes it `size` bytes or more (still valid JSON)."""
    return json.dumps({**body, "padding": "x" * size}).encode()


def test_oversized_bodies_are_413_in_each_doors_wire(door_for, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_MAX_BODY_BYTES = 2000
    door = door_for("acme")
    before = Run.unscoped_all_tenants.count()

    assert_envelope(door.post("/runs", _padded({"workflowId": "echo"}, 3000)), "payload_too_large", 413)

    body = assert_jsonrpc_error(door.post("/a2a/jsonrpc", _padded(a2a_send("big-1"), 3000)), -32600, 413)
    assert a2a_reason(body) == "INVALID_REQUEST"
    rest = door.post("/a2a/rest/message:send", _padded(a2a_send("big-2")["params"], 3000))
    assert rest.status_code == 413 and rest.json()["error"]["code"] == 413
    assert a2a_reason(rest.json()) == "INVALID_REQUEST"

    mcp = door.post("/mcp", _padded(mcp_list(), 3000), **MCP_LIST_HEADERS)
    assert assert_jsonrpc_error(mcp, -32600, 413)["error"]["data"]["reason"] == "payload_too_large"

    assert Run.unscoped_all_tenants.count() == before
    # Just under the ceiling is served as usual.
    assert door.post("/a2a/jsonrpc", a2a_send("small-1")).json()["result"]["task"]["id"]
    assert Run.unscoped_all_tenants.count() == before + 1


def test_the_declared_length_alone_refuses_before_reading(door_for, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_MAX_BODY_BYTES = 2000
    door = door_for("acme")
    # The test client sends the real length; a lying larger CONTENT_LENGTH is refused unread.
    response = door.client.post(
        "/runs",
        data=b"{}",
        content_type="application/json",
        headers={"Authorization": f"Bearer {door.key}"},
        CONTENT_LENGTH="999999999",
    )
    assert_envelope(response, "payload_too_large", 413)


def test_deep_json_is_refused_before_parsing(door_for) -> None:  # type: ignore[no-untyped-def]
    door = door_for("acme")
    before = Run.unscoped_all_tenants.count()
    body = assert_envelope(door.post("/runs", DEEP), "validation_error", 400)
    assert body["details"] == {"maxDepth": 64}

    deep_rpc = b'{"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    assert a2a_reason(assert_jsonrpc_error(door.post("/a2a/jsonrpc", deep_rpc), -32700, 400)) == "PARSE_ERROR"
    assert door.post("/a2a/rest/message:send", DEEP).json()["error"]["status"] == "INVALID_ARGUMENT"
    assert_jsonrpc_error(door.post("/mcp", deep_rpc, **MCP_LIST_HEADERS), -32700, 400)
    assert Run.unscoped_all_tenants.count() == before


def test_depth_at_the_ceiling_reaches_the_view(door_for) -> None:  # type: ignore[no-untyped-def]
    door = door_for("acme")
    inputs: Any = "leaf"
    for _ in range(62):  # {"workflowId", "inputs": <62 levels>} is 63 deep: under the ceiling of 64
        inputs = [inputs]
    response = door.post("/runs", {"workflowId": "echo", "inputs": {"v": inputs}})
    assert response.status_code in (201, 400)  # the view judged it (echo may refuse the inputs)
    assert response.json().get("details") != {"maxDepth": 64}


def test_rate_limit_per_key_on_every_door(door_for, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RATE_LIMIT_REQUESTS = 3
    settings.OPENWOP_RATE_LIMIT_WINDOW_SECONDS = 86400  # no window boundary inside the test
    acme, globex = door_for("acme"), door_for("globex")
    for _ in range(3):
        assert acme.get("/runs").status_code == 200
    refused = assert_envelope(acme.get("/runs"), "rate_limited", 429)
    assert refused["details"] == {"limit": 3}
    retry_after = int(acme.get("/runs")["Retry-After"])
    assert 1 <= retry_after <= 86400

    before = Run.unscoped_all_tenants.count()
    a2a = acme.post("/a2a/jsonrpc", a2a_send("rl-1", request_id="r-9"))
    assert a2a_reason(assert_jsonrpc_error(a2a, -32000, 429, "r-9")) == "RATE_LIMIT_EXCEEDED"
    assert int(a2a["Retry-After"]) >= 1
    status = acme.get("/a2a/rest/tasks")
    assert status.status_code == 429 and status.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    mcp = acme.post("/mcp", mcp_list(request_id=5), **MCP_LIST_HEADERS)
    assert assert_jsonrpc_error(mcp, -32000, 429, 5)["error"]["data"]["reason"] == "rate_limited"
    assert int(mcp["Retry-After"]) >= 1
    assert Run.unscoped_all_tenants.count() == before  # the refused SendMessage started nothing

    # Another tenant's key has its own budget (and so does every other key of acme).
    assert globex.get("/runs").status_code == 200
    assert door_for("acme").get("/runs").status_code == 200


def test_unauthenticated_requests_have_no_bucket_and_stay_401(client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RATE_LIMIT_REQUESTS = 1
    for _ in range(3):
        assert_envelope(client.get("/runs"), "unauthenticated", 401)


def test_limits_are_advertised_in_discovery(client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RATE_LIMIT_REQUESTS = 77
    settings.OPENWOP_MAX_STREAMS_PER_KEY = 5
    doc = client.get("/.well-known/openwop").json()
    limits = doc["extensions"]["openwop-host.limits"]
    assert limits["rateLimit"]["requests"] == 77 and limits["maxConcurrentStreamsPerKey"] == 5
    assert limits["maxBodyBytes"] == settings.OPENWOP_MAX_BODY_BYTES
    assert limits["maxJsonDepth"] == settings.OPENWOP_MAX_JSON_DEPTH
