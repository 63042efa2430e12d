"""A request body dripped slowly (apps/core/read_deadline.py): refused once the body is overdue, in
each door's own wire (REST envelope, A2A JSON-RPC and HTTP+JSON, MCP, the console's page), with
`Connection: close`; a body that arrives in time is served as before. Through a live uvicorn, with
a raw socket: no client library sends a body 10 bytes at a time on purpose."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.live import start_web

DRIP = b"0123456789"
DRIP_EVERY_SECONDS = 0.1
DRIPS = 3  # 30 bytes of a 400-byte body, then nothing more: the rest is overdue
BODY_BYTES = 400
ANSWER_WAIT_SECONDS = 30  # without a deadline the server waits for the rest for ever: no answer at all


@pytest.fixture
def slow_host(transactional_db: None, live_env: tuple[dict[str, str], Path], tmp_path: Path) -> Iterator[str]:
    env, _ = live_env
    web, base_url = start_web({**env, "OPENWOP_BODY_READ_TIMEOUT_SECONDS": "1"}, tmp_path)
    yield base_url
    web.stop()


def _drip(base_url: str, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """POST `path` declaring a body of BODY_BYTES, send DRIPS pieces of it slowly, then nothing:
    the status, headers and body of the answer that comes (the client sends nothing more meanwhile,
    so the server's close after its answer is a clean one)."""
    address = urlsplit(base_url)
    lines = [f"POST {path} HTTP/1.1", f"Host: {address.hostname}:{address.port}", f"Content-Length: {BODY_BYTES}",
             "Content-Type: application/json", *(f"{k}: {v}" for k, v in headers.items()), "", ""]  # fmt: skip
    with socket.create_connection((address.hostname, address.port), timeout=ANSWER_WAIT_SECONDS) as conn:
        conn.sendall("\r\n".join(lines).encode("latin-1"))
        for _ in range(DRIPS):
            time.sleep(DRIP_EVERY_SECONDS)
            conn.sendall(DRIP)
        answer = b""
        while chunk := conn.recv(65536):  # until the server closes (Connection: close)
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    answer_headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in header_lines)}
    return int(status_line.split()[1]), answer_headers, body


def _json(body: bytes) -> Any:
    return json.loads(body)


@pytest.mark.slow
def test_a_dripped_body_is_refused_in_each_doors_wire(slow_host: str, make_key: Any) -> None:
    key = make_key("acme")
    bearer = {"Authorization": f"Bearer {key}"}

    status, headers, body = _drip(slow_host, "/runs", bearer)
    assert (status, headers["connection"]) == (408, "close")
    assert _json(body) == {"error": "openwop-host.request_timeout", "message": "The request body did not arrive "
                           "within 1 s.", "details": {"timeoutSeconds": 1}}  # fmt: skip

    status, headers, body = _drip(slow_host, "/a2a/jsonrpc", {**bearer, "A2A-Version": "1.0"})
    assert (status, headers["connection"]) == (408, "close")
    error = _json(body)["error"]
    assert error["code"] == -32600 and error["data"][0]["reason"] == "INVALID_REQUEST"

    status, headers, body = _drip(slow_host, "/a2a/rest/message:send", {**bearer, "A2A-Version": "1.0"})
    assert (status, headers["connection"]) == (408, "close")
    assert _json(body)["error"]["status"] == "DEADLINE_EXCEEDED"

    status, headers, body = _drip(slow_host, "/mcp", {**bearer, "MCP-Protocol-Version": "2026-07-28"})
    assert (status, headers["connection"]) == (408, "close")
    error = _json(body)["error"]
    assert error["code"] == -32600 and error["data"]["reason"] == "body_timeout"

    status, headers, body = _drip(slow_host, "/console/login/", {})
    assert (status, headers["connection"]) == (408, "close")
    assert headers["content-type"].startswith("text/html") and b"did not arrive in time" in body


def test_a_body_in_time_is_served_and_another_tenants_key_changes_nothing(slow_host: str, make_key: Any) -> None:
    """The deadline refuses slowness, not callers: a body sent at once is answered as always, for
    one tenant's key and another's (each reading its own runs only)."""
    for tenant in ("acme", "globex"):
        key = make_key(tenant)
        created = httpx.post(f"{slow_host}/runs", headers={"Authorization": f"Bearer {key}"},
                             json={"workflowId": "conformance-noop", "inputs": {}}, timeout=30)  # fmt: skip
        assert created.status_code == 201, created.text
        listed = httpx.get(f"{slow_host}/runs", headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
        assert [run["runId"] for run in listed["runs"]] == [created.json()["runId"]]
