"""The HTTP mount's refusals and plain methods, in-process (Django test client, `db`).

Black-box runs with the SDK client live in test_live_sdk.py; these cover the many error rungs.
"""

from __future__ import annotations

import json

import pytest

from apps.audit.models import HostEvent
from apps.facets.services import facet_update
from tests.mcp.conftest import TASKS, VERSION, McpCaller, routing_headers, rpc

pytestmark = pytest.mark.django_db


def _error(response, status: int, code: int) -> dict:  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["jsonrpc"] == "2.0" and "result" not in body
    assert body["error"]["code"] == code, body
    assert "message" in body["error"]
    return body


def _negotiations(caller: McpCaller) -> list[dict]:
    return [
        e.payload
        for e in HostEvent.unscoped_all_tenants.filter(subject_id=caller.subject.subject_id, type="negotiation.decided")
    ]


def test_get_and_delete_are_405(acme: McpCaller) -> None:
    for verb in ("get", "delete"):
        response = getattr(acme.client, verb)("/mcp", headers={"Authorization": f"Bearer {acme.key}"})
        assert response.status_code == 405 and response["Allow"] == "POST"
        assert b'"error"' not in response.content or b"jsonrpc" in response.content  # never the OpenWOP envelope
        assert "OpenWOP-Version" not in response


@pytest.mark.parametrize("authorization", [None, "Bearer owk_nope.nope", "Basic abc"])
def test_missing_or_invalid_bearer_is_401_json_rpc(acme: McpCaller, authorization: str | None) -> None:
    body = rpc("tools/list")
    headers = routing_headers(body)
    if authorization:
        headers["Authorization"] = authorization
    response = acme.post_raw(body, headers, auth=False)
    error = _error(response, 401, -32600)
    assert error["id"] == 1 and error["error"]["data"]["reason"] == "unauthenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert _negotiations(acme) == []  # nothing is negotiated with nobody


def test_bad_origin_is_403_before_anything_else(acme: McpCaller) -> None:
    body = rpc("tools/list")
    response = acme.post_raw(body, {**routing_headers(body), "Origin": "http://evil.example"})
    _error(response, 403, -32600)
    allowed = acme.post_raw(body, {**routing_headers(body), "Origin": "http://localhost:8000"})
    assert allowed.status_code == 200


def test_parse_error_and_invalid_request(acme: McpCaller) -> None:
    _error(acme.post_raw("{not json", routing_headers(rpc("tools/list"))), 400, -32700)
    _error(acme.post_raw([rpc("tools/list")], {}), 400, -32600)  # no batches since 2025-06-18
    _error(acme.post_raw({"jsonrpc": "1.0", "id": 1, "method": "tools/list"}, {}), 400, -32600)


@pytest.mark.parametrize(
    ("header", "value"),
    [("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Method", "tools/list"), ("Mcp-Name", "other-tool")],
)
def test_header_body_disagreement_is_32020_before_version_support(acme: McpCaller, header: str, value: str) -> None:
    body = rpc("tools/call", {"name": "echo", "arguments": {}})
    _error(acme.post_raw(body, {**routing_headers(body), header: value}), 400, -32020)
    # Even for a revision we do not offer, the disagreement is what is reported.
    odd = rpc("tools/list", version="2030-01-01")
    _error(acme.post_raw(odd, {**routing_headers(odd), "MCP-Protocol-Version": VERSION}), 400, -32020)
    assert _negotiations(acme) == []


def test_missing_routing_headers_are_a_mismatch(acme: McpCaller) -> None:
    body = rpc("tools/call", {"name": "echo", "arguments": {}})
    _error(acme.post_raw(body, {}), 400, -32020)
    headers = routing_headers(body)
    del headers["Mcp-Name"]
    _error(acme.post_raw(body, headers), 400, -32020)


def test_base64_encoded_mcp_name_is_accepted(acme: McpCaller) -> None:
    body = rpc("tools/call", {"name": "echo", "arguments": {}}, capabilities={"extensions": {TASKS: {}}})
    response = acme.post_raw(body, {**routing_headers(body), "Mcp-Name": "=?base64?ZWNobw==?="})
    assert response.status_code == 200, response.content


def test_missing_meta_or_capabilities_is_32602(acme: McpCaller) -> None:
    """A request without `clientCapabilities` is malformed (-32602, as mcp 2.3.0 and the conformance
    suite's sep-2575 check say); -32021 is for one capability the request did not declare."""
    no_meta = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
    _error(acme.post_raw(no_meta, {"MCP-Protocol-Version": VERSION, "Mcp-Method": "tools/list"}), 400, -32602)
    no_caps = rpc("tools/list", meta={"io.modelcontextprotocol/protocolVersion": VERSION})
    _error(acme.post_raw(no_caps, routing_headers(no_caps)), 400, -32602)
    bad_caps = rpc(
        "tools/list",
        meta={
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": ["elicitation"],
        },
    )
    _error(acme.post_raw(bad_caps, routing_headers(bad_caps)), 400, -32602)
    # Headers still come first: a mismatch is -32020 even when the capabilities are missing.
    _error(acme.post_raw(no_caps, {**routing_headers(no_caps), "Mcp-Method": "tools/call"}), 400, -32020)
    assert _negotiations(acme) == []


def test_unsupported_revision_is_32022_with_supported_and_is_recorded(acme: McpCaller) -> None:
    body = rpc("tools/list", version="2025-06-18")
    error = _error(acme.post_raw(body, routing_headers(body, "2025-06-18")), 400, -32022)
    assert error["error"]["data"] == {"supported": ["2026-07-28"], "requested": "2025-06-18"}
    [record] = _negotiations(acme)
    assert record["protocol"] == "mcp" and record["outcome"] == "refused" and record["requested"] == "2025-06-18"


def test_one_negotiation_record_per_exchange(acme: McpCaller) -> None:
    assert acme.call("server/discover").status_code == 200
    assert acme.call("tools/list").status_code == 200
    records = _negotiations(acme)
    assert [(r["outcome"], r["version"]) for r in records] == [("accepted", VERSION)] * 2
    assert all("127.0.0.1" not in json.dumps(r) for r in records)  # content-free


def test_unknown_method_is_404_32601(acme: McpCaller) -> None:
    for method in ("tasks/result", "tasks/list", "initialize-nope", "ping"):
        error = _error(acme.call(method), 404, -32601)
        assert error["error"]["data"] == method


def test_notification_is_202(acme: McpCaller) -> None:
    body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}
    response = acme.post_raw(body, {"MCP-Protocol-Version": VERSION, "Mcp-Method": body["method"]})
    assert response.status_code == 202 and response.content == b""


def test_server_discover(acme: McpCaller) -> None:
    result = acme.call("server/discover").json()["result"]
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == ["2026-07-28"]
    assert result["capabilities"]["extensions"] == {TASKS: {}}
    assert result["cacheScope"] == "public" and result["ttlMs"] >= 0
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "openwop-host"


def test_discover_stops_advertising_tasks_when_the_operator_drops_extensions(acme: McpCaller) -> None:
    facet_update(protocol="mcp", changes={"features": ["server-discover", "mrtr", "cacheable-lists"]}, actor="test")
    result = acme.call("server/discover").json()["result"]
    assert "extensions" not in result["capabilities"]
    # and a call declaring it is answered as core MCP: -32021 on tasks/*
    _error(
        acme.call(
            "tasks/get", {"taskId": "acme~2Fxxxxxxxxxxxxxxxxxxxxxxxxxx"}, capabilities={"extensions": {TASKS: {}}}
        ),
        400,
        -32021,
    )


def test_tools_list_is_the_callers_workflows_sorted_and_private(acme: McpCaller, globex: McpCaller) -> None:
    from apps.agents.services import workflow_create
    from apps.tenants.models import Tenant

    workflow_create(
        tenant=Tenant.objects.get(slug="globex"),
        workflow_id="globex-only",
        definition={"nodes": [{"id": "e", "kind": "echo", "config": {}}]},
        input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
    )
    acme_tools = acme.call("tools/list").json()["result"]
    globex_tools = globex.call("tools/list").json()["result"]
    names = [t["name"] for t in acme_tools["tools"]]
    assert names == sorted(names) and "echo" in names and "conformance-approval" in names
    assert "globex-only" not in names
    assert "globex-only" in [t["name"] for t in globex_tools["tools"]]
    assert acme_tools["cacheScope"] == "private" and acme_tools["ttlMs"] >= 0
    assert all(t["inputSchema"]["type"] == "object" for t in acme_tools["tools"])
    delay = next(t for t in acme_tools["tools"] if t["name"] == "conformance-delay")
    assert delay["inputSchema"]["properties"]["delayMs"]["type"] == "integer"
    assert acme.call("tools/list").json()["result"]["tools"] == acme_tools["tools"]  # identical per caller
    # Another tenant's workflow is not a tool of this caller.
    error = _error(acme.call("tools/call", {"name": "globex-only", "arguments": {}}), 400, -32602)
    assert "globex-only" in error["error"]["message"]


def test_arguments_are_validated_before_any_run_exists(acme: McpCaller) -> None:
    from apps.runs.models import Run

    error = _error(
        acme.call("tools/call", {"name": "conformance-delay", "arguments": {"delayMs": "soon"}}), 400, -32602
    )
    assert error["error"]["data"]["errors"][0]["path"] == "/delayMs"
    _error(acme.call("tools/call", {"name": "echo", "arguments": [1, 2]}), 400, -32602)
    assert not Run.unscoped_all_tenants.exists()


def test_approval_tool_needs_form_elicitation_before_any_run(acme: McpCaller) -> None:
    from apps.runs.models import Run

    error = _error(
        acme.call("tools/call", {"name": "conformance-approval", "arguments": {}}, capabilities={}), 400, -32021
    )
    assert error["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert not Run.unscoped_all_tenants.exists()


def test_credential_tool_without_url_mode_is_a_tool_error_without_a_run(acme: McpCaller) -> None:
    from apps.runs.models import Run

    response = acme.call(
        "tools/call", {"name": "conformance-credential", "arguments": {}}, capabilities={"elicitation": {"form": {}}}
    )
    result = response.json()["result"]
    assert response.status_code == 200 and result["isError"] is True and result["resultType"] == "complete"
    assert not Run.unscoped_all_tenants.exists()


def test_server_discover_lists_only_what_the_callers_tenant_accepts(acme: McpCaller, globex: McpCaller) -> None:
    from apps.facets.services import version_policy_set
    from apps.tenants.models import Tenant

    old = "2025-11-25"
    facet_update(
        protocol="mcp",
        changes={"versions": [VERSION, old], "preferred_version": VERSION, "minimum_version": old},
        actor="test",
    )
    version_policy_set(tenant=Tenant.objects.get(slug="globex"), agent=None, protocol="mcp", minimum=VERSION, actor="t")
    everyone = acme.call("server/discover").json()["result"]
    assert sorted(everyone["supportedVersions"]) == sorted([VERSION, old]) and everyone["cacheScope"] == "public"
    strict = globex.call("server/discover").json()["result"]
    assert strict["supportedVersions"] == [VERSION] and strict["cacheScope"] == "private"
