"""Black-box: a tools/call's run told on its own response stream (apps/mcp/notifications.py).

`io.modelcontextprotocol/logLevel` -> `notifications/message`, `progressToken` ->
`notifications/progress`, each only when the request carried it; the `mcp` SDK client and raw
httpx against a live uvicorn and Celery worker on loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import httpx
import mcp_types as types
import pytest

from apps.runs.models import Run
from tests.live import ROOT, wait_until
from tests.mcp.conftest import VERSION, routing_headers, rpc
from tests.mcp.sdk_client import mcp_client
from tests.mcp.test_live_sdk import _newest_mcp_run, _raw_post

pytestmark = pytest.mark.django_db(transaction=True)

LOG_LEVEL = "io.modelcontextprotocol/logLevel"
STEP_MS = 800  # each delay node of test_tool_with_progress: long enough to see the stream move


@pytest.fixture
def key(live_url: str, live_worker, make_key) -> str:  # type: ignore[no-untyped-def]
    return make_key("acme")


class Seen:
    """Everything the SDK client received besides responses, with the time it arrived."""

    def __init__(self) -> None:
        self.items: list[tuple[float, str, Any]] = []

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.items.append((time.monotonic(), "log", params))

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.items.append((time.monotonic(), "progress", (progress, total, message)))

    async def message(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification | types.ServerRequest | Exception):
            self.items.append((time.monotonic(), "other", message))

    def logs(self) -> list[dict[str, Any]]:
        return [{"level": p.level, **p.data} for _, kind, p in self.items if kind == "log"]

    def kinds(self) -> list[str]:
        return [kind for _, kind, _ in self.items]


async def test_log_and_progress_arrive_in_order_while_a_worker_runs(live_url: str, key: str) -> None:
    seen = Seen()
    async with mcp_client(live_url, key, logging_callback=seen.log, log_level="debug") as client:
        started = time.monotonic()
        result = await client.call_tool(
            "test_tool_with_progress", {"delayMs": STEP_MS}, progress_callback=seen.progress
        )
        answered = time.monotonic()
    assert result.is_error is False and result.structured_content == {"text": "Progress test completed."}

    # Progress: one per node completion, monotonic, total = the number of nodes.
    progress = [p for _, kind, p in seen.items if kind == "progress"]
    assert [(p, t) for p, t, _ in progress] == [(1, 3), (2, 3), (3, 3)]
    assert progress[0][2] == "Node step-1 completed."
    # Logs: every node event (debug and up), in event order, content-free.
    run_id = result.meta["dev.openwop/runId"]  # type: ignore[index]
    assert seen.logs() == [
        {"level": "debug", "runId": run_id, "nodeId": node, "kind": kind, "status": status}
        for node, kind in (("step-1", "delay"), ("step-2", "delay"), ("text", "echo"))
        for status in ("started", "completed")
    ]
    # Interleaved in the run's order: a completion's progress before its completed log.
    assert seen.kinds() == ["log", "progress", "log"] * 3
    # Told as the run went, not all at the end: the first completion came a step before the result.
    first = seen.items[1][0]
    assert first - started < answered - started - STEP_MS / 1000 / 2


async def test_log_level_filters_and_log_nodes_say_their_message(live_url: str, key: str) -> None:
    for level, expected in (
        ("info", ["Tool execution started", "Tool processing data", "Tool execution completed"]),
        ("warning", []),
    ):
        seen = Seen()
        async with mcp_client(live_url, key, logging_callback=seen.log, log_level=level) as client:
            result = await client.call_tool("test_logging_tool", {})
        assert result.is_error is False
        logs = seen.logs()
        assert [entry["message"] for entry in logs] == expected
        assert all(entry["level"] == "info" and entry["kind"] == "log" for entry in logs)
        assert all(set(entry) == {"level", "runId", "nodeId", "kind", "status", "message"} for entry in logs)

    seen = Seen()
    async with mcp_client(live_url, key, logging_callback=seen.log, log_level="debug") as client:
        await client.call_tool("test_logging_tool", {})
    statuses = [(entry["nodeId"], entry["status"]) for entry in seen.logs()]
    assert statuses == [
        (node, status) for node in ("started", "processing", "completed", "text") for status in ("started", "completed")
    ]


async def test_nothing_is_told_without_the_meta(live_url: str, key: str) -> None:
    seen = Seen()
    async with mcp_client(live_url, key, logging_callback=seen.log, message_handler=seen.message) as client:
        quick = await client.call_tool("test_logging_tool", {})
        slow = await client.call_tool("test_tool_with_progress", {"delayMs": 300})
    assert quick.is_error is False and slow.is_error is False
    assert seen.items == []


def _post(live_url: str, key: str, body: dict[str, Any], accept: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "Accept": accept, **routing_headers(body)}
    return httpx.post(f"{live_url}/mcp", json=body, headers=headers, timeout=30)


def _sse_messages(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: ")]


def _meta(**extra: Any) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        **extra,
    }


def test_raw_http_answers_plain_json_without_the_meta(live_url: str, key: str) -> None:
    body = rpc("tools/call", {"name": "test_logging_tool", "arguments": {}}, id=7, meta=_meta())
    response = _post(live_url, key, body, "application/json, text/event-stream")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    # Byte shape unchanged: one compact JSON-RPC object, nothing before or after it.
    assert response.content == json.dumps(answer, separators=(",", ":")).encode()
    assert list(answer) == ["jsonrpc", "id", "result"] and answer["id"] == 7
    assert answer["result"]["structuredContent"] == {"text": "Logging test completed."}

    # Asked, but the client cannot take a stream: plain JSON, no notifications.
    body = rpc("tools/call", {"name": "test_logging_tool", "arguments": {}}, id=8, meta=_meta(**{LOG_LEVEL: "debug"}))
    response = _post(live_url, key, body, "application/json")
    assert response.headers["content-type"] == "application/json"
    assert list(response.json()) == ["jsonrpc", "id", "result"]


def test_raw_http_streams_the_asked_notifications_then_the_response(live_url: str, key: str) -> None:
    meta = _meta(**{LOG_LEVEL: "info", "progressToken": "tok-1"})
    body = rpc("tools/call", {"name": "test_logging_tool", "arguments": {}}, id=9, meta=meta)
    response = _post(live_url, key, body, "application/json, text/event-stream")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = _sse_messages(response.text)
    *notifications, answer = messages
    assert answer["id"] == 9 and answer["result"]["isError"] is False
    assert [(m["method"], m["params"].get("progress")) for m in notifications] == [
        ("notifications/progress", 1),
        ("notifications/message", None),
        ("notifications/progress", 2),
        ("notifications/message", None),
        ("notifications/progress", 3),
        ("notifications/message", None),
        ("notifications/progress", 4),
    ]
    assert all("id" not in m for m in notifications)
    assert {m["params"]["progressToken"] for m in notifications if "progressToken" in m["params"]} == {"tok-1"}
    assert {m["params"].get("total") for m in notifications if "progressToken" in m["params"]} == {4}
    log = notifications[1]["params"]
    assert log["level"] == "info" and log["logger"] == "openwop.run"
    assert log["data"]["message"] == "Tool execution started"


def test_stdio_sends_the_same_notifications(live_env, live_worker, make_key) -> None:  # type: ignore[no-untyped-def]
    env, _ = live_env
    env = {**env, "OPENWOP_TEST_MCP_KEY": make_key("acme")}
    lines = [
        rpc("tools/call", {"name": "test_logging_tool", "arguments": {}}, id=1, meta=_meta(**{LOG_LEVEL: "info"})),
        rpc("tools/call", {"name": "test_logging_tool", "arguments": {}}, id=2, meta=_meta()),
    ]

    def stdio(line: dict[str, Any]) -> str:
        return subprocess.run(
            [sys.executable, "manage.py", "mcp_stdio", "--api-key-env", "OPENWOP_TEST_MCP_KEY"],
            input=json.dumps(line) + "\n",
            capture_output=True,
            text=True,
            env=env,
            cwd=str(ROOT),
            timeout=60,
            check=True,
        ).stdout

    out = stdio(lines[0])
    messages = [json.loads(line) for line in out.splitlines()]
    assert [m.get("method") for m in messages] == ["notifications/message"] * 3 + [None]
    assert messages[-1]["id"] == 1 and messages[-1]["result"]["isError"] is False
    out = stdio(lines[1])
    assert [json.loads(line).get("id") for line in out.splitlines()] == [2]


def test_disconnect_from_a_notified_stream_cancels_the_run(live_url: str, key: str) -> None:
    meta = _meta(**{LOG_LEVEL: "debug", "progressToken": 1})
    body = rpc("tools/call", {"name": "conformance-cancellable", "arguments": {"waitMs": 60000}}, meta=meta)
    sock = _raw_post(live_url, key, body)
    sock.settimeout(30)
    received = b""
    while b'"status":"started"' not in received:  # the node.started message: the run is working
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    assert b"text/event-stream" in received
    sock.close()
    run = wait_until(lambda: _newest_mcp_run("conformance-cancellable"), "the run to exist")
    wait_until(lambda: Run.unscoped_all_tenants.get(pk=run.pk).status == "cancelled", "the run to be cancelled")
    run.refresh_from_db()
    assert run.cancel_reason == "mcp-request-cancelled"
