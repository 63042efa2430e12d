"""Black-box: the `mcp` SDK client (2.3.0) against a live uvicorn and Celery worker on loopback."""

from __future__ import annotations

import json
import re
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from mcp.shared.exceptions import MCPError

from apps.runs.models import Run, RunEvent
from tests.live import wait_until
from tests.mcp.conftest import TASKS, routing_headers, rpc
from tests.mcp.sdk_client import TasksExtension, mcp_client, task_cancel, task_get

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def key(live_url: str, live_worker, make_key) -> str:  # type: ignore[no-untyped-def]
    return make_key("acme")


async def _accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    if isinstance(params, types.ElicitRequestURLParams):
        return types.ElicitResult(action="accept")
    return types.ElicitResult(action="accept", content={"action": "accept", "comment": "lgtm"})


async def _decline(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


@pytest.mark.parametrize("mode", ["2026-07-28", "auto"])
async def test_discover_list_and_call_every_fixture(live_url: str, key: str, mode: str) -> None:
    async with mcp_client(live_url, key, mode=mode, elicitation_callback=_accept) as client:
        assert client.protocol_version == "2026-07-28"
        if mode == "auto":  # the probe was a real server/discover
            assert client.server_capabilities.extensions == {TASKS: {}}
            assert client.server_info is not None and client.server_info.name == "openwop-host"
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == sorted(names)
        assert {
            "conformance-noop",
            "conformance-failure",
            "conformance-delay",
            "conformance-approval",
            "conformance-credential",
            "conformance-cancellable",
            "echo",
        } <= set(names)

        noop = await client.call_tool("conformance-noop", {})
        assert noop.is_error is False and noop.structured_content == {}
        echo = await client.call_tool("echo", {"greeting": "hi"})
        assert echo.is_error is False and echo.structured_content == {"greeting": "hi"}
        assert json.loads(echo.content[0].text) == {"greeting": "hi"}  # type: ignore[union-attr]
        delay = await client.call_tool("conformance-delay", {"delayMs": 100})
        assert delay.is_error is False and delay.structured_content == {"delayedMs": 100}
        failure = await client.call_tool("conformance-failure", {})
        assert failure.is_error is True and "conformance_failure" in failure.content[0].text  # type: ignore[union-attr]
        # MRTR through the approval fixture: the SDK answers the form elicitation and retries.
        approval = await client.call_tool("conformance-approval", {})
        assert approval.is_error is False
        assert approval.structured_content == {"approved": True, "action": "accept", "comment": "lgtm"}
        # The credential interrupt is URL-mode elicitation.
        credential = await client.call_tool("conformance-credential", {})
        assert credential.is_error is False and credential.structured_content["connected"] is True

    run_id = approval.meta["dev.openwop/runId"]  # type: ignore[index]
    run, started = await sync_to_async(_run_and_start)(run_id)
    assert run.transport == "mcp" and run.status == "completed" and started["transport"] == "mcp"


def _run_and_start(run_id: str) -> tuple[Run, dict[str, Any]]:
    try:
        run = Run.unscoped_all_tenants.get(run_id=run_id)
        return run, RunEvent.unscoped_all_tenants.get(run=run, sequence=1).payload
    finally:
        connection.close()  # this ran in sync_to_async's worker thread: leave no session behind


async def test_declined_approval_is_a_tool_error(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key, elicitation_callback=_decline) as client:
        result = await client.call_tool("conformance-approval", {})
    assert result.is_error is True and "approval_rejected" in result.content[0].text  # type: ignore[union-attr]


async def test_mrtr_round_trip_by_hand_and_replay_refused(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key, elicitation_callback=_accept) as client:
        session = client.session
        first = await session.call_tool("conformance-approval", {"n": 1}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult) and first.request_state
        [(interrupt_id, request)] = first.input_requests.items()  # type: ignore[union-attr]
        assert interrupt_id.startswith("acme/") and isinstance(request, types.ElicitRequest)
        answer = {interrupt_id: types.ElicitResult(action="accept", content={"action": "accept"})}
        done = await session.call_tool(
            "conformance-approval",
            {"n": 1},
            input_responses=answer,
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(done, types.CallToolResult) and done.is_error is False
        with pytest.raises(MCPError) as replay:
            await session.call_tool(
                "conformance-approval",
                {"n": 1},
                input_responses=answer,
                request_state=first.request_state,
                allow_input_required=True,
            )
        assert replay.value.error.code == -32602
        # Two runs of one workflow never share an input key.
        again = await session.call_tool("conformance-approval", {"n": 1}, allow_input_required=True)
        assert isinstance(again, types.InputRequiredResult) and interrupt_id not in again.input_requests  # type: ignore[operator]


async def test_tasks_flow_create_get_update_cancel(live_url: str, key: str) -> None:
    async def approve(key_: str, request: dict[str, Any]) -> dict[str, Any]:
        assert request["params"]["mode"] == "form"
        return {"action": "accept", "content": {"action": "accept"}}

    tasks = TasksExtension(answer=approve)
    async with mcp_client(live_url, key, extensions=[tasks], elicitation_callback=_accept) as client:
        # create -> polled get -> input_required -> update -> completed, resolved by the claim
        approved = await client.call_tool("conformance-approval", {})
        assert approved.is_error is False and approved.structured_content["approved"] is True
        statuses = [s.status for s in tasks.seen]
        assert "input_required" in statuses and statuses[-1] == "completed"
        assert all(s.task_id == tasks.seen[0].task_id for s in tasks.seen)

        # create, then cancel through tasks/cancel
        created = await client.session.call_tool("conformance-cancellable", {"waitMs": 60000}, allow_claimed=True)
        assert created.result_type == "task" and created.status == "working"  # type: ignore[attr-defined]
        task_id = created.task_id  # type: ignore[attr-defined]
        await task_cancel(client.session, task_id)
        state = await task_get(client.session, task_id)
        deadline = time.monotonic() + 30
        while state.status != "cancelled" and time.monotonic() < deadline:
            state = await task_get(client.session, task_id)
        assert state.status == "cancelled"


# --- cancellation: the run belongs to the request until the whole response is sent -----------------


def _raw_post(base_url: str, key: str, body: dict[str, Any]) -> socket.socket:
    """Send a POST on a raw socket, so the test decides exactly when the connection goes away."""
    parts = urlsplit(base_url)
    data = json.dumps(body).encode()
    headers = {
        "Host": parts.netloc,
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Content-Length": str(len(data)),
        **routing_headers(body),
    }
    sock = socket.create_connection((parts.hostname, parts.port))
    head = "POST /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    sock.sendall(head.encode() + data)
    return sock


def _read_response(sock: socket.socket) -> dict[str, Any]:
    """The one JSON-RPC response, sent as JSON (Content-Length) or, for a slow answer, as SSE."""
    sock.settimeout(60)
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(65536)
    head, _, rest = raw.partition(b"\r\n\r\n")
    lengths = [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    if not lengths:  # chunked text/event-stream: read up to the end of the `message` event
        while not re.search(rb"data: [^\r\n]*\n\n", rest):
            rest += sock.recv(65536)
        return json.loads(re.search(rb"data: ([^\r\n]*)", rest).group(1))  # type: ignore[union-attr]
    length = int(lengths[0])
    while len(rest) < length:
        rest += sock.recv(65536)
    return json.loads(rest[:length])


def _newest_mcp_run(workflow_id: str) -> Run | None:
    return Run.unscoped_all_tenants.filter(transport="mcp", workflow__workflow_id=workflow_id).order_by("-id").first()


def test_disconnect_before_the_response_cancels_the_run(live_url: str, key: str) -> None:
    body = rpc("tools/call", {"name": "conformance-cancellable", "arguments": {"waitMs": 60000}})
    sock = _raw_post(live_url, key, body)
    run = wait_until(lambda: _newest_mcp_run("conformance-cancellable"), "the run to exist")
    wait_until(lambda: Run.unscoped_all_tenants.get(pk=run.pk).status == "running", "the run to start")
    sock.close()
    wait_until(lambda: Run.unscoped_all_tenants.get(pk=run.pk).status == "cancelled", "the run to be cancelled")
    run.refresh_from_db()
    assert run.cancel_reason == "mcp-request-cancelled"
    cancelled = RunEvent.unscoped_all_tenants.get(run=run, type="run.cancelled")
    assert cancelled.payload["reason"] == "mcp-request-cancelled"


def test_disconnect_after_the_response_changes_nothing(live_url: str, key: str) -> None:
    # An answered MRTR round: the run waits for approval, and the closed connection leaves it so.
    sock = _raw_post(live_url, key, rpc("tools/call", {"name": "conformance-approval", "arguments": {}}))
    answer = _read_response(sock)
    sock.close()
    assert answer["result"]["resultType"] == "input_required"
    run_id = answer["result"]["_meta"]["dev.openwop/runId"]
    # A task: the run keeps going after its CreateTaskResult went out and the client hung up.
    with_tasks = {"elicitation": {"form": {}}, "extensions": {TASKS: {}}}
    sock = _raw_post(
        live_url,
        key,
        rpc("tools/call", {"name": "conformance-cancellable", "arguments": {"waitMs": 60000}}, capabilities=with_tasks),
    )
    task = _read_response(sock)["result"]
    sock.close()
    assert task["resultType"] == "task"
    task_run_id = task["_meta"]["dev.openwop/runId"]
    wait_until(lambda: Run.unscoped_all_tenants.get(run_id=task_run_id).status == "running", "the task's run to start")

    # Resolving the approval over REST completes it: the disconnect did not cancel it.
    resolved = httpx.post(
        f"{live_url}/runs/{run_id.replace('/', '~2F')}/interrupts/approve",
        json={"resumeValue": {"action": "accept"}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert resolved.status_code == 200, resolved.text
    wait_until(
        lambda: Run.unscoped_all_tenants.get(run_id=run_id).status == "completed", "the approval run to complete"
    )
    task_run = Run.unscoped_all_tenants.get(run_id=task_run_id)
    assert task_run.status == "running" and task_run.cancel_reason == ""
    # It ends through tasks/cancel (as cancelRun), not through the connection.
    sock = _raw_post(live_url, key, rpc("tasks/cancel", {"taskId": task["taskId"]}, capabilities=with_tasks))
    assert _read_response(sock)["result"]["resultType"] == "complete"
    sock.close()
    wait_until(
        lambda: Run.unscoped_all_tenants.get(run_id=task_run_id).status == "cancelled", "the task to be cancelled"
    )
    assert Run.unscoped_all_tenants.get(run_id=task_run_id).cancel_reason != "mcp-request-cancelled"
