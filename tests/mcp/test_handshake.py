"""Handshake-era revisions (2025-06-18, 2025-11-25) on the same mount, when the operator offers them.

The `mcp` SDK client in mode="legacy" (initialize + Mcp-Session-Id) drives a live server; raw httpx
sends what the SDK never would: a missing, unknown, ended or another tenant's session, and a wrong
MCP-Protocol-Version. Every exchange leaves one `negotiation.decided` record.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from apps.audit.models import HostEvent
from apps.facets.negotiation import NEGOTIATION_EVENT
from apps.facets.services import facet_update
from apps.mcp.models import McpSession
from apps.runs.models import Run
from tests.mcp.sdk_client import mcp_client

pytestmark = pytest.mark.django_db(transaction=True)

ALL = ["2025-06-18", "2025-11-25", "2026-07-28"]


def _offer(versions: list[str], floor: str | None = None) -> None:
    facet_update(
        protocol="mcp",
        changes={"versions": versions, "minimum_version": floor or versions[0], "preferred_version": "2026-07-28"},
        actor="test",
    )


def _offer_in_thread(versions: list[str]) -> None:
    """_offer from an async test (sync_to_async's worker thread): leave no connection behind."""
    try:
        _offer(versions)
    finally:
        connection.close()


@pytest.fixture
def keys(live_url: str, live_worker, make_key) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"acme": make_key("acme"), "globex": make_key("globex")}


def _initialize_body(version: str = "2025-11-25", id: Any = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }


def _open(url: str, key: str, version: str = "2025-11-25") -> str:
    response = httpx.post(f"{url}/mcp", json=_initialize_body(version), headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    assert response.json()["result"]["protocolVersion"] == version
    return response.headers["Mcp-Session-Id"]


def _list(url: str, key: str, session: str | None, version: str | None = "2025-11-25", id: Any = 2) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    return httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": id, "method": "tools/list"}, headers=headers)


def _negotiations(tenant: str) -> list[dict[str, Any]]:
    try:
        events = HostEvent.unscoped_all_tenants.filter(type=NEGOTIATION_EVENT, subject__tenant=tenant)
        return [e.payload for e in events.order_by("sequence")]
    finally:
        connection.close()


def _sessions(tenant: str) -> list[str]:
    try:
        return [s.protocol_version for s in McpSession.unscoped_all_tenants.filter(tenant__slug=tenant)]
    finally:
        connection.close()


def _runs(tenant: str) -> int:
    try:
        return Run.unscoped_all_tenants.filter(tenant__slug=tenant).count()
    finally:
        connection.close()


async def test_sdk_legacy_client_lists_and_calls_over_a_session(live_url: str, keys: dict[str, str]) -> None:
    await sync_to_async(_offer_in_thread)(ALL)
    async with mcp_client(live_url, keys["acme"], mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        assert client.server_info is not None and client.server_info.name == "openwop-host"
        names = [t.name for t in (await client.list_tools()).tools]
        assert "echo" in names and names == sorted(names)
        echo = await client.call_tool("echo", {"greeting": "hi"})
        assert echo.is_error is False and echo.structured_content == {"greeting": "hi"}
        failure = await client.call_tool("conformance-failure", {})
        assert failure.is_error is True and "conformance_failure" in failure.content[0].text  # type: ignore[union-attr]
        runs_before = await sync_to_async(_runs)("acme")
        # No MRTR at this revision: an interrupting tool is a tool error before any run exists.
        approval = await client.call_tool("conformance-approval", {})
        assert approval.is_error is True and "2025-11-25 cannot carry" in approval.content[0].text  # type: ignore[union-attr]
        assert await sync_to_async(_runs)("acme") == runs_before
        assert await sync_to_async(_sessions)("acme") == ["2025-11-25"]
    # The SDK sent DELETE on close: the session is gone.
    assert await sync_to_async(_sessions)("acme") == []


async def test_a_session_reads_prompts_resources_and_completions(live_url: str, keys: dict[str, str]) -> None:
    await sync_to_async(_offer_in_thread)(ALL)
    async with mcp_client(live_url, keys["acme"], mode="legacy") as client:
        capabilities = client.server_capabilities
        assert capabilities.prompts is not None and capabilities.resources is not None
        assert capabilities.completions is not None
        prompt = await client.get_prompt("test_prompt_with_arguments", {"arg1": "{{7*7}}", "arg2": "b"})
        assert "{{7*7}}" in prompt.messages[0].content.text  # type: ignore[union-attr]
        uris = [str(r.uri) for r in (await client.list_resources()).resources]
        assert "test://static-text" in uris
        read = await client.read_resource("test://static-text")
        assert read.contents[0].text.startswith("This is the content")  # type: ignore[union-attr]
        # A tool whose task support is required has no task at this revision: a tool error.
        job = await client.call_tool("failing_job", {})
        assert job.is_error is True and "runs only as a task" in job.content[0].text  # type: ignore[union-attr]


def test_a_session_call_with_a_progress_token_streams_its_progress(live_url: str, keys: dict[str, str]) -> None:
    _offer(ALL)
    session = _open(live_url, keys["acme"])
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "p-7"}},
    }
    headers = {
        "Authorization": f"Bearer {keys['acme']}",
        "Mcp-Session-Id": session,
        "MCP-Protocol-Version": "2025-11-25",
        "Accept": "application/json, text/event-stream",
    }
    response = httpx.post(f"{live_url}/mcp", json=body, headers=headers, timeout=30)
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert [p["progress"] for p in progress] == [1, 2, 3] and {p["progressToken"] for p in progress} == {"p-7"}
    final = messages[-1]
    assert final["id"] == 7 and final["result"]["isError"] is False
    assert "resultType" not in final["result"]  # the handshake-era shape


async def test_sdk_auto_mode_still_picks_2026_07_28(live_url: str, keys: dict[str, str]) -> None:
    await sync_to_async(_offer_in_thread)(ALL)
    async with mcp_client(live_url, keys["acme"], mode="auto") as client:
        assert client.protocol_version == "2026-07-28"


async def test_a_revision_not_offered_is_answered_with_the_newest_offered(live_url: str, keys: dict[str, str]) -> None:
    # The SDK asks for 2025-11-25; only 2025-06-18 is offered: the lifecycle's counter-offer.
    await sync_to_async(_offer_in_thread)(["2025-06-18", "2026-07-28"])
    async with mcp_client(live_url, keys["acme"], mode="legacy") as client:
        assert client.protocol_version == "2025-06-18"
        assert (await client.call_tool("echo", {"greeting": "old"})).structured_content == {"greeting": "old"}
    records = await sync_to_async(_negotiations)("acme")
    initialize, *rest = [r for r in records if r.get("requested") in ("2025-11-25", "2025-06-18")]
    assert initialize["outcome"] == "refused" and initialize["requested"] == "2025-11-25"
    assert rest and all(r["outcome"] == "accepted" and r["version"] == "2025-06-18" for r in rest)


def test_each_exchange_is_negotiated_once(live_url: str, keys: dict[str, str]) -> None:
    _offer(ALL)
    before = len(_negotiations("acme"))
    session = _open(live_url, keys["acme"])
    assert _list(live_url, keys["acme"], session).status_code == 200
    records = _negotiations("acme")[before:]
    assert [(r["outcome"], r["version"], r["requested"]) for r in records] == [
        ("accepted", "2025-11-25", "2025-11-25"),
        ("accepted", "2025-11-25", "2025-11-25"),
    ]


def test_missing_unknown_foreign_and_ended_sessions(live_url: str, keys: dict[str, str]) -> None:
    _offer(ALL)
    session = _open(live_url, keys["acme"])
    listed = _list(live_url, keys["acme"], session)
    assert listed.status_code == 200 and "echo" in {t["name"] for t in listed.json()["result"]["tools"]}
    assert "resultType" not in listed.json()["result"]  # the handshake-era shape

    missing = _list(live_url, keys["acme"], None)
    assert missing.status_code == 400 and missing.json()["error"]["code"] == -32600

    unknown = _list(live_url, keys["acme"], "not-a-session", id=7)
    foreign = _list(live_url, keys["globex"], session, id=7)
    assert unknown.status_code == foreign.status_code == 404
    assert unknown.content == foreign.content  # another tenant's session is exactly an unknown one
    assert foreign.json() == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": "Session not found"}}

    auth = {"Authorization": f"Bearer {keys['acme']}", "Mcp-Session-Id": session}
    as_globex = {**auth, "Authorization": f"Bearer {keys['globex']}"}
    assert httpx.delete(f"{live_url}/mcp", headers=as_globex).status_code == 404
    assert httpx.delete(f"{live_url}/mcp", headers=auth).status_code == 204
    assert _list(live_url, keys["acme"], session, id=7).content == unknown.content
    assert httpx.delete(f"{live_url}/mcp", headers=auth).status_code == 404


def test_protocol_version_header_must_be_the_sessions(live_url: str, keys: dict[str, str]) -> None:
    _offer(ALL)
    session = _open(live_url, keys["acme"], "2025-06-18")
    assert _list(live_url, keys["acme"], session, "2025-06-18").status_code == 200
    for wrong in ("2025-11-25", "2026-07-28", "banana", None):  # None: a headerless request means 2025-03-26
        refused = _list(live_url, keys["acme"], session, wrong)
        assert refused.status_code == 400, (wrong, refused.text)
        assert refused.json()["error"]["message"] == "Unsupported protocol version"


def test_notifications_need_a_live_session(live_url: str, keys: dict[str, str]) -> None:
    _offer(ALL)
    session = _open(live_url, keys["acme"])
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    headers = {"Authorization": f"Bearer {keys['acme']}", "MCP-Protocol-Version": "2025-11-25"}
    ok = httpx.post(f"{live_url}/mcp", json=note, headers={**headers, "Mcp-Session-Id": session})
    assert ok.status_code == 202
    foreign = httpx.post(
        f"{live_url}/mcp",
        json=note,
        headers={**headers, "Authorization": f"Bearer {keys['globex']}", "Mcp-Session-Id": session},
    )
    assert foreign.status_code == 404


def test_not_offered_means_no_initialize_and_no_delete(live_url: str, keys: dict[str, str]) -> None:
    _offer(["2026-07-28"])
    auth = {"Authorization": f"Bearer {keys['acme']}"}
    response = httpx.post(f"{live_url}/mcp", json=_initialize_body(), headers=auth)
    assert response.status_code == 400 and "Mcp-Session-Id" not in response.headers
    assert response.json()["error"]["code"] == -32602  # the stateless ladder: no `_meta` envelope
    assert httpx.delete(f"{live_url}/mcp", headers={**auth, "Mcp-Session-Id": "x"}).status_code == 404
    get = httpx.get(f"{live_url}/mcp", headers=auth)
    assert get.status_code == 405 and get.headers["Allow"] == "POST"


def test_below_the_floor_is_not_served(live_url: str, keys: dict[str, str]) -> None:
    _offer(ALL, floor="2025-11-25")
    assert _list(live_url, keys["acme"], _open(live_url, keys["acme"]), "2025-11-25").status_code == 200
    response = httpx.post(
        f"{live_url}/mcp", json=_initialize_body("2025-06-18"), headers={"Authorization": f"Bearer {keys['acme']}"}
    )
    assert response.json()["result"]["protocolVersion"] == "2025-11-25"  # counter-offer above the floor
