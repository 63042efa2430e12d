"""A spent tenant budget on every door of a live server, through the real clients (issue 49 item 2):
REST's 429 envelope, A2A's JSON-RPC error -32000 / RATE_LIMIT_EXCEEDED (a2a-sdk SendMessage; gRPC
RESOURCE_EXHAUSTED), MCP's
JSON-RPC error -32000 with data.reason rate_limited (mcp SDK tools/call), each with Retry-After on
HTTP and naming the budget. Nothing is written; another tenant is served; the budget is set with
`manage.py tenant_budget` (the live server sees it on its next request: the invalidation trigger)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import SendMessageConfiguration, SendMessageRequest, a2a_pb2_grpc
from django.core.management import call_command
from google.rpc import error_details_pb2, status_pb2
from mcp.shared.exceptions import MCPError

from apps.runs.models import Run, RunEvent
from apps.tenants.models import Tenant
from tests.a2a.live import Session, db_read, live_card, user_message
from tests.live import start_grpc
from tests.mcp.sdk_client import mcp_client
from tests.tenants.test_tenant_budgets import windows_forget

pytestmark = pytest.mark.django_db(transaction=True)

DELAY_INPUTS = {"delayMs": 60_000}  # a run that would park on its delay (not queued) if a worker ran it
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


@pytest.fixture
def keys(live_url: str, make_key) -> dict[str, str]:  # type: ignore[no-untyped-def]
    windows_forget()
    return {"acme": make_key("acme"), "globex": make_key("globex")}


def _budget(slug: str, **values: int) -> None:
    args = [f"--{name.replace('_', '-')}={value}" for name, value in values.items()]
    call_command("tenant_budget", "set", "--tenant", slug, *args, stdout=open("/dev/null", "w"))  # noqa: SIM115


def _written(slug: str) -> tuple[set[str], int]:
    """The tenant's runs, and the events of runs other than those: a refused create adds neither.
    (A live worker of the suite may be advancing an admitted run meanwhile: its events are its own.)"""
    tenant = Tenant.objects.get(slug=slug)
    runs = set(Run.objects.for_tenant(tenant).values_list("run_id", flat=True))
    return runs, RunEvent.objects.for_tenant(tenant).exclude(run__run_id__in=runs).count()


def _hold_queued(run_id: str) -> None:
    """Keep an admitted run queued whatever the suite's live workers do: once no worker holds it
    (not yet claimed, or parked on its delay), move it to a queue no worker consumes, due now."""
    for _ in range(200):
        moved = Run.unscoped_all_tenants.filter(run_id=run_id, lease_owner="").update(
            queue="budget-test-unconsumed", wake_at=datetime(1970, 1, 1, tzinfo=UTC)
        )
        if moved:
            return
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} stayed leased by a worker")


async def _rest_create(live_url: str, key: str, workflow_id: str, inputs: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(
            f"{live_url}/runs", json={"workflowId": workflow_id, "inputs": inputs},
            headers={"Authorization": f"Bearer {key}"},
        )  # fmt: skip


async def test_rest_refuses_past_runs_queued_with_429_and_retry_after(live_url: str, keys: dict[str, str]) -> None:
    await db_read(lambda: _budget("acme", runs_queued=1))
    admitted = await _rest_create(live_url, keys["acme"], "conformance-delay", DELAY_INPUTS)
    assert admitted.status_code == 201, admitted.text
    await db_read(lambda: _hold_queued(admitted.json()["runId"]))
    before = await db_read(lambda: _written("acme"))
    refused = await _rest_create(live_url, keys["acme"], "conformance-delay", DELAY_INPUTS)
    assert refused.status_code == 429
    assert refused.json() == {
        "error": "rate_limited", "message": refused.json()["message"], "details": {"budget": "runs_queued", "limit": 1},
    }  # fmt: skip
    assert int(refused.headers["Retry-After"]) >= 1
    assert await db_read(lambda: _written("acme")) == before
    assert (await _rest_create(live_url, keys["globex"], "conformance-delay", DELAY_INPUTS)).status_code == 201
    assert (await _rest_create(live_url, keys["globex"], "conformance-delay", DELAY_INPUTS)).status_code == 201


async def _a2a_send(live_url: str, key: str, *, skill: str, data: dict[str, Any]) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": "b-1", "method": "SendMessage", "params": {
        "message": {"role": "ROLE_USER", "messageId": f"m-{id(data)}-{skill}", "parts": [{"data": data}],
                    "metadata": {"openwop": {"skillId": skill}}},
        "configuration": {"returnImmediately": True}}}  # fmt: skip
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(
            f"{live_url}/a2a/jsonrpc", content=json.dumps(body),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", "A2A-Version": "1.0"},
        )  # fmt: skip


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a2a_send_message_gets_the_protocols_error(live_url: str, keys: dict[str, str], binding: str) -> None:
    await db_read(lambda: _budget("acme", runs_per_minute=1))
    card = await live_card(live_url)
    session = Session(card, binding, keys["acme"])
    try:
        client = session.client()
        request = SendMessageRequest(
            message=user_message(prefix="budget", data=DELAY_INPUTS, skill="conformance-delay"),
            configuration=SendMessageConfiguration(return_immediately=True),
        )
        [first] = [event async for event in client.send_message(request)]
        assert first.HasField("task")
        before = await db_read(lambda: _written("acme"))
        again = SendMessageRequest(
            message=user_message(prefix="budget", data=DELAY_INPUTS, skill="conformance-delay"),
            configuration=SendMessageConfiguration(return_immediately=True),
        )
        with pytest.raises(Exception) as refused:  # the sdk's class for a 429: its text is asserted
            [event async for event in client.send_message(again)]
        text = f"{type(refused.value).__name__}: {refused.value!r}"
        assert "429" in text or "RATE_LIMIT" in text or "-32000" in text, text
        assert await db_read(lambda: _written("acme")) == before
    finally:
        await session.close()

    # The wire itself (JSON-RPC binding): -32000, one ErrorInfo naming the budget, 429 + Retry-After.
    raw = await _a2a_send(live_url, keys["acme"], skill="conformance-delay", data=DELAY_INPUTS)
    assert raw.status_code == 429 and int(raw.headers["Retry-After"]) >= 1
    error = raw.json()["error"]
    assert error["code"] == -32000
    [info] = error["data"]
    assert info["reason"] == "RATE_LIMIT_EXCEEDED"
    assert info["metadata"]["budget"] == "runs_per_minute" and info["metadata"]["limit"] == "1"
    # Another tenant: served.
    other = await _a2a_send(live_url, keys["globex"], skill="conformance-delay", data=DELAY_INPUTS)
    assert other.status_code == 200 and other.json()["result"]["task"]["id"]


async def test_mcp_tools_call_gets_a_jsonrpc_error_naming_the_budget(live_url: str, keys: dict[str, str]) -> None:
    await db_read(lambda: _budget("acme", runs_per_minute=1))
    async with mcp_client(live_url, keys["acme"]) as client:
        assert (await client.call_tool("echo", {"greeting": "hi"})).structured_content == {"greeting": "hi"}
        before = await db_read(lambda: _written("acme"))
        with pytest.raises(MCPError) as refused:
            await client.call_tool("echo", {"greeting": "again"})
        assert refused.value.error.code == -32000
        assert refused.value.error.data == {"reason": "rate_limited", "budget": "runs_per_minute", "limit": 1}
        assert await db_read(lambda: _written("acme")) == before
    async with mcp_client(live_url, keys["globex"]) as client:
        assert (await client.call_tool("echo", {"greeting": "hi"})).structured_content == {"greeting": "hi"}
    # Retry-After on the HTTP answer (raw: the SDK does not expose headers).
    async with httpx.AsyncClient(timeout=30) as http:
        raw = await http.post(
            f"{live_url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "echo", "arguments": {}, "_meta": META}},
            headers={"Authorization": f"Bearer {keys['acme']}", "Accept": "application/json, text/event-stream",
                     "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"},
        )  # fmt: skip
    assert raw.status_code == 429, raw.text
    assert int(raw.headers["Retry-After"]) >= 1
    assert raw.json()["error"]["data"]["budget"] == "runs_per_minute"


def test_grpc_send_message_answers_resource_exhausted_naming_the_budget(live_env, make_key) -> None:  # type: ignore[no-untyped-def]
    env, var_dir = live_env
    windows_forget()
    key = make_key("acme")
    _budget("acme", runs_per_minute=1)
    live, address = start_grpc(env, var_dir)
    try:

        async def sends() -> list[grpc.StatusCode]:
            codes = []
            async with grpc.aio.insecure_channel(address) as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)
                metadata = (("authorization", f"Bearer {key}"), ("a2a-version", "1.0"))
                for _ in range(2):
                    request = SendMessageRequest(
                        message=user_message(prefix="grpc-budget", data=DELAY_INPUTS, skill="conformance-delay"),
                        configuration=SendMessageConfiguration(return_immediately=True),
                    )
                    try:
                        await stub.SendMessage(request, metadata=metadata)
                        codes.append(grpc.StatusCode.OK)
                    except grpc.aio.AioRpcError as error:
                        codes.append(error.code())
                        raw = dict(error.trailing_metadata() or ())["grpc-status-details-bin"]
                        status = status_pb2.Status.FromString(raw)
                        info = error_details_pb2.ErrorInfo()
                        status.details[0].Unpack(info)
                        assert info.reason == "RATE_LIMIT_EXCEEDED"
                        assert info.metadata["budget"] == "runs_per_minute" and info.metadata["limit"] == "1"
                        assert int(info.metadata["retryAfterSeconds"]) >= 1
            return codes

        before = _written("acme")
        codes = asyncio.run(sends())
        assert codes == [grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED]
        assert len(_written("acme")[0]) == len(before[0]) + 1  # the refused one wrote nothing
    finally:
        live.stop()
