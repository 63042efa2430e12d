"""`manage.py mcp_stdio`: the same mount over stdio, driven by the SDK client and by raw lines."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from apps.runs.models import Run
from tests.live import ROOT, wait_until
from tests.mcp.conftest import rpc

pytestmark = pytest.mark.django_db(transaction=True)
KEY_VAR = "OPENWOP_TEST_MCP_KEY"


@pytest.fixture
def stdio_env(live_env, live_worker, make_key) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env, _ = live_env
    return {**env, KEY_VAR: make_key("acme")}


def _command() -> list[str]:
    return [sys.executable, "manage.py", "mcp_stdio", "--api-key-env", KEY_VAR]


async def _accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"action": "accept"})


@pytest.mark.parametrize("mode", ["auto", "2026-07-28"])
async def test_sdk_client_over_stdio(stdio_env: dict[str, str], mode: str) -> None:
    command = _command()
    server = StdioServerParameters(command=command[0], args=command[1:], env=stdio_env, cwd=str(ROOT))
    async with Client(server, mode=mode, elicitation_callback=_accept) as client:
        assert client.protocol_version == "2026-07-28"
        names = [t.name for t in (await client.list_tools()).tools]
        assert "echo" in names and names == sorted(names)
        echo = await client.call_tool("echo", {"over": "stdio"})
        assert echo.is_error is False and echo.structured_content == {"over": "stdio"}
        approval = await client.call_tool("conformance-approval", {})
        assert approval.is_error is False and approval.structured_content["approved"] is True
        failure = await client.call_tool("conformance-failure", {})
        assert failure.is_error is True
    transport = await sync_to_async(_transport_of)(approval.meta["dev.openwop/runId"])  # type: ignore[index]
    assert transport == "mcp"


def _transport_of(run_id: str) -> str:
    try:
        return Run.unscoped_all_tenants.get(run_id=run_id).transport
    finally:
        connection.close()  # this ran in sync_to_async's worker thread: leave no session behind


def test_notifications_cancelled_cancels_the_run_and_gets_no_answer(stdio_env: dict[str, str]) -> None:
    proc = subprocess.Popen(
        _command(), cwd=ROOT, env=stdio_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:

        def send(message: dict[str, Any]) -> None:
            proc.stdin.write(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]

        # Only a run created by this call: an earlier test's MCP run may still be in the database.
        before = Run.unscoped_all_tenants.order_by("-id").values_list("id", flat=True).first() or 0
        send(rpc("tools/call", {"name": "conformance-cancellable", "arguments": {"waitMs": 60000}}, id=2))
        run = wait_until(
            lambda: Run.unscoped_all_tenants.filter(transport="mcp", id__gt=before).order_by("-id").first(),
            "the run to exist",
        )
        wait_until(lambda: Run.unscoped_all_tenants.get(pk=run.pk).status == "running", "the run to start")
        send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
        wait_until(lambda: Run.unscoped_all_tenants.get(pk=run.pk).status == "cancelled", "the run to be cancelled")
        assert Run.unscoped_all_tenants.get(pk=run.pk).cancel_reason == "mcp-request-cancelled"
        send(rpc("tools/list", id=3))
        answer = json.loads(proc.stdout.readline())
        assert answer["id"] == 3 and "result" in answer  # nothing was ever written for id 2
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_refuses_to_start_without_a_valid_key(stdio_env: dict[str, str]) -> None:
    for value in ("", "owk_nope.nope"):
        result = subprocess.run(
            _command(), cwd=ROOT, env={**stdio_env, KEY_VAR: value}, capture_output=True, timeout=60, input=b""
        )
        assert result.returncode != 0 and result.stdout == b""
        assert b"owk_nope" not in result.stderr  # never echo a credential


def _offer_handshake_revisions() -> None:
    from apps.facets.services import facet_update

    try:
        facet_update(
            protocol="mcp",
            changes={"versions": ["2025-06-18", "2025-11-25", "2026-07-28"], "minimum_version": "2025-06-18"},
            actor="test",
        )
    finally:
        connection.close()  # sync_to_async's worker thread: leave no session behind


async def test_a_handshake_era_client_over_stdio_when_offered(stdio_env: dict[str, str]) -> None:
    await sync_to_async(_offer_handshake_revisions)()
    command = _command()
    server = StdioServerParameters(command=command[0], args=command[1:], env=stdio_env, cwd=str(ROOT))
    async with Client(server, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        assert "echo" in [t.name for t in (await client.list_tools()).tools]
        echo = await client.call_tool("echo", {"over": "stdio"})
        assert echo.is_error is False and echo.structured_content == {"over": "stdio"}
        approval = await client.call_tool("conformance-approval", {})  # no MRTR at this revision
        assert approval.is_error is True and "cannot carry" in approval.content[0].text  # type: ignore[union-attr]
